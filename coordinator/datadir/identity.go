package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// identityFile is the identity's name in the data directory.
const identityFile = "identity.json"

// Identity is what a member's data directory records of the cluster it
// belongs to. It is written once the member has applied its cluster's ID,
// and checked at every start and every join.
type Identity struct {
	// ClusterID is the cluster's ID, fixed by its first leader and
	// replicated.
	ClusterID string `json:"cluster_id"`
	// NodeID is the member this directory is the data of.
	NodeID string `json:"node_id"`
	// Region is the region the member serves (--region): its ledger's
	// lines and leases are that region's. Empty in files written before
	// it was recorded.
	Region string `json:"region,omitempty"`
	// Written is when the file was written.
	Written time.Time `json:"written"`
}

// ReadIdentity returns the identity in dir, or nil if it has none.
func ReadIdentity(dir string) (*Identity, error) {
	path := filepath.Join(dir, identityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &Error{Path: path, Problem: fmt.Sprintf("cannot be read: %v", err), Runbook: RunbookLostDisk, kind: ErrIdentity}
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil || id.ClusterID == "" || id.NodeID == "" {
		if err == nil {
			err = errors.New("cluster_id and node_id are required")
		}
		return nil, &Error{Path: path, Problem: fmt.Sprintf("is not a valid identity file (%v)", err), Runbook: RunbookLostDisk, kind: ErrIdentity}
	}
	return &id, nil
}

// WriteIdentity writes id into dir, replacing the file atomically: a
// crash leaves the old file or the new one, never a part.
func WriteIdentity(dir string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("datadir: encoding the identity: %w", err)
	}
	tmp, err := os.CreateTemp(dir, identityFile+".*.tmp")
	if err != nil {
		return fmt.Errorf("datadir: writing the identity: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("datadir: writing the identity: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("datadir: writing the identity: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("datadir: writing the identity: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, identityFile)); err != nil {
		return fmt.Errorf("datadir: writing the identity: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("datadir: writing the identity: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("datadir: writing the identity: %w", err)
	}
	return nil
}
