package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a throwaway certificate authority that writes PEM files into a
// directory: for `allot demo` and tests, never for production (use your
// PKI, cert-manager or SPIFFE; docs/security.md).
type CA struct {
	// File is the CA certificate's PEM file.
	File string
	// Domain is the trust domain of the role URIs it issues.
	Domain string

	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Issued names an issued certificate's PEM files.
type Issued struct {
	CertFile, KeyFile string
}

// NewCA makes a CA valid for a day and writes it to dir/name.pem.
func NewCA(dir, name, domain string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("auth: making a CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{File: filepath.Join(dir, name+".pem"), Domain: domain, dir: dir, cert: cert, key: key}
	return ca, writePEM(ca.File, "CERTIFICATE", der)
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// File names its files: File.pem and File-key.pem.
	File string
	// Role and Name make its URI SAN; a zero Role issues none (a legacy
	// certificate naming CommonName).
	Role Role
	Name string
	// CommonName, DNSNames and IPs are its subject and host names.
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	// NotBefore and NotAfter bound its validity; zero means from an hour
	// ago for a day.
	NotBefore, NotAfter time.Time
}

// Issue signs a certificate for l, usable by servers and clients.
func (ca *CA) Issue(l Leaf) (Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, err
	}
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = l.NotBefore.Add(25 * time.Hour)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: l.CommonName},
		DNSNames: l.DNSNames, IPAddresses: l.IPs, NotBefore: l.NotBefore, NotAfter: l.NotAfter,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	if l.Role != 0 {
		tmpl.URIs = append(tmpl.URIs, RoleURI(ca.Domain, l.Role, l.Name))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Issued{}, fmt.Errorf("auth: issuing %s: %w", l.File, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Issued{}, err
	}
	out := Issued{CertFile: filepath.Join(ca.dir, l.File+".pem"), KeyFile: filepath.Join(ca.dir, l.File+"-key.pem")}
	if err := writePEM(out.KeyFile, "EC PRIVATE KEY", kder); err != nil {
		return Issued{}, err
	}
	return out, writePEM(out.CertFile, "CERTIFICATE", der)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// writePEM writes a PEM file whole: to a temporary name, then renamed, so
// that a process re-reading it never sees half of it.
func writePEM(path, typ string, der []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// IssueMember signs a member certificate for coordinator id, for the
// loopback addresses throwaway clusters listen on.
func (ca *CA) IssueMember(id string) (Issued, error) {
	return ca.Issue(Leaf{File: id, Role: Member, Name: id, CommonName: id,
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
}

// TokenSpec is a token to make: its name, role and, for an agent, the
// node IDs it may report as, for a balance token its tenant.
type TokenSpec struct {
	Name   string
	Role   Role
	Nodes  string
	Tenant string
}

// IssueTokens makes a random token for each spec, writes it to
// dir/<name>.token (mode 0600), and writes the coordinators' tokens file,
// dir/tokens.yaml, listing their SHA-256s, checked as the coordinators
// check it. It returns the tokens file and each token's file by name.
func IssueTokens(dir string, specs ...TokenSpec) (tokensFile string, files map[string]string, err error) {
	files = map[string]string{}
	body := "tokens:\n"
	for _, s := range specs {
		tok := NewToken()
		files[s.Name] = filepath.Join(dir, s.Name+".token")
		if err := os.WriteFile(files[s.Name], []byte(tok+"\n"), 0o600); err != nil {
			return "", nil, err
		}
		body += fmt.Sprintf("  - {name: %q, role: %s, sha256: %s", s.Name, s.Role, TokenSHA256(tok))
		if s.Nodes != "" {
			body += fmt.Sprintf(", nodes: %q", s.Nodes)
		}
		if s.Tenant != "" {
			body += fmt.Sprintf(", tenant: %q", s.Tenant)
		}
		body += "}\n"
	}
	tokensFile = filepath.Join(dir, "tokens.yaml")
	if _, err := ParseTokens(tokensFile, []byte(body)); err != nil {
		return "", nil, err
	}
	return tokensFile, files, os.WriteFile(tokensFile, []byte(body), 0o600)
}
