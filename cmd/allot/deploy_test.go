package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// deployDir is the deployment files' directory, from this package's.
var deployDir = filepath.Join("..", "..", "deploy")

// flagNames lists the flags `allot <cmd>` takes, from its --help.
func flagNames(t *testing.T, cmd string) map[string]bool {
	t.Helper()
	_, stdout, stderr := runAllot(t, cliEnv(), cmd, "--help")
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`).FindAllStringSubmatch(stdout+stderr, -1) {
		names[m[1]] = true
	}
	if len(names) < 5 {
		t.Fatalf("allot %s --help lists no flags:\n%s%s", cmd, stdout, stderr)
	}
	return names
}

// checkArgs fails for any --flag in args that `allot <args[0]>` does not
// take, and returns the flags' values.
func checkArgs(t *testing.T, where string, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("%s: no arguments", where)
	}
	known := flagNames(t, args[0])
	values := map[string]string{}
	for _, a := range args[1:] {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !known[name] {
			t.Errorf("%s: allot %s takes no %q", where, args[0], a)
		}
		values[name] = value
	}
	return values
}

// TestSystemdUnits verifies the units with systemd-analyze, the binary
// pointed at one built from this tree, and checks the commands they run.
func TestSystemdUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	dir := t.TempDir()
	for _, unit := range []string{"allot-coordinator.service", "allot-agent.service"} {
		b, err := os.ReadFile(filepath.Join(deployDir, "systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		exec := regexp.MustCompile(`(?m)^ExecStart=/usr/local/bin/allot (.*)$`).FindSubmatch(b)
		if exec == nil {
			t.Fatalf("%s: no ExecStart of /usr/local/bin/allot", unit)
		}
		checkArgs(t, unit, strings.Fields(string(exec[1])))
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/allot"), []byte(allotBinary(t)))
		if err := os.WriteFile(filepath.Join(dir, unit), b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec2(analyze, "verify", filepath.Join(dir, unit))
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
		}
	}
}

func exec2(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// k8sObject is the part of a manifest the checks read.
type k8sObject struct {
	doc  map[string]any
	file string
}

func (o k8sObject) kind() string { return str(o.doc["kind"]) }
func (o k8sObject) name() string { return str(dig(o.doc, "metadata", "name")) }

func str(v any) string { s, _ := v.(string); return s }

// dig walks nested maps by key.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }

// TestKubernetesManifests reads every manifest strictly and checks what
// this machine can without a cluster: each object's identity; allot
// containers' flags against the binary; probes on the port --http-addr
// serves and on paths it answers (/readyz, /livez; /healthz on the
// coordinator); the StatefulSet's headless Service, volumes and
// selectors; the PodDisruptionBudget's and monitors' selectors.
func TestKubernetesManifests(t *testing.T) {
	var objs []k8sObject
	files, _ := filepath.Glob(filepath.Join(deployDir, "kubernetes", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no manifests")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			o := k8sObject{doc: doc, file: filepath.Base(f)}
			if str(doc["apiVersion"]) == "" || o.kind() == "" || o.name() == "" {
				t.Errorf("%s: an object without apiVersion, kind or name: %v", o.file, doc)
			}
			objs = append(objs, o)
		}
	}
	byKind := map[string][]k8sObject{}
	for _, o := range objs {
		byKind[o.kind()] = append(byKind[o.kind()], o)
	}
	for _, kind := range []string{"StatefulSet", "Service", "PodDisruptionBudget", "ServiceMonitor", "Deployment", "NetworkPolicy", "PodMonitor"} {
		if len(byKind[kind]) == 0 {
			t.Errorf("no %s", kind)
		}
	}
	matches := func(selector, labels any) bool {
		sel, _ := selector.(map[string]any)
		lab, _ := labels.(map[string]any)
		if len(sel) == 0 {
			return false
		}
		for k, v := range sel {
			if lab[k] != v {
				return false
			}
		}
		return true
	}
	paths := map[string]map[string]bool{
		"coordinator": {"/readyz": true, "/healthz": true},
		"agent":       {"/readyz": true, "/livez": true, "/healthz": true},
	}
	for _, o := range append(byKind["StatefulSet"], byKind["Deployment"]...) {
		spec := dig(o.doc, "spec", "template", "spec")
		podLabels := dig(o.doc, "spec", "template", "metadata", "labels")
		if !matches(dig(o.doc, "spec", "selector", "matchLabels"), podLabels) {
			t.Errorf("%s %s: its selector does not match its pods' labels", o.kind(), o.name())
		}
		for _, c := range append(list(dig(spec, "initContainers")), list(dig(spec, "containers"))...) {
			if !strings.Contains(str(dig(c, "image")), "allot") {
				continue
			}
			args := []string{}
			for _, a := range list(dig(c, "args")) {
				args = append(args, str(a))
			}
			where := o.file + ": " + str(dig(c, "name"))
			values := checkArgs(t, where, args)
			// The probes go to the sidecar's --probe-addr when it has one.
			probeFlag := "http-addr"
			if values["probe-addr"] != "" {
				probeFlag = "probe-addr"
			}
			_, port, _ := strings.Cut(values[probeFlag], ":")
			for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
				p := dig(c, probe, "httpGet")
				if p == nil {
					continue
				}
				if got := dig(p, "port"); strconv.Itoa(intOf(got)) != port {
					t.Errorf("%s: %s on port %v, but --%s serves %s", where, probe, got, probeFlag, port)
				}
				if !paths[args[0]][str(dig(p, "path"))] {
					t.Errorf("%s: %s on %v, which allot %s does not answer", where, probe, dig(p, "path"), args[0])
				}
			}
			if args[0] == "agent" && (dig(c, "readinessProbe") == nil || dig(c, "livenessProbe") == nil || dig(c, "readinessProbe", "httpGet", "path") == dig(c, "livenessProbe", "httpGet", "path")) {
				t.Errorf("%s: the sidecar needs readiness on /readyz and liveness on /livez", where)
			}
			// The sidecar refuses check listeners beyond loopback without
			// client certificates (or --insecure).
			for _, flag := range []string{"http-addr", "grpc-addr"} {
				if args[0] == "agent" && values[flag] != "" && !isLoopbackAddr(values[flag]) && values["http-client-ca"] == "" && !hasKey(values, "insecure") {
					t.Errorf("%s: --%s %s is beyond loopback without --http-client-ca: the sidecar would not start", where, flag, values[flag])
				}
			}
			if args[0] == "agent" && o.kind() == "Deployment" && str(dig(c, "restartPolicy")) != "Always" {
				t.Errorf("%s: a native sidecar is an init container with restartPolicy Always", where)
			}
		}
	}
	for _, ss := range byKind["StatefulSet"] {
		headless := false
		for _, svc := range byKind["Service"] {
			if svc.name() == str(dig(ss.doc, "spec", "serviceName")) && str(dig(svc.doc, "spec", "clusterIP")) == "None" &&
				matches(dig(svc.doc, "spec", "selector"), dig(ss.doc, "spec", "template", "metadata", "labels")) {
				headless = true
			}
		}
		if !headless {
			t.Errorf("StatefulSet %s: no headless Service named %v selecting its pods", ss.name(), dig(ss.doc, "spec", "serviceName"))
		}
		if len(list(dig(ss.doc, "spec", "volumeClaimTemplates"))) == 0 {
			t.Errorf("StatefulSet %s: no persistent volume", ss.name())
		}
		covered := false
		for _, pdb := range byKind["PodDisruptionBudget"] {
			covered = covered || matches(dig(pdb.doc, "spec", "selector", "matchLabels"), dig(ss.doc, "spec", "template", "metadata", "labels"))
		}
		if !covered {
			t.Errorf("StatefulSet %s: no PodDisruptionBudget", ss.name())
		}
	}
	for _, sm := range byKind["ServiceMonitor"] {
		found := false
		for _, svc := range byKind["Service"] {
			if matches(dig(sm.doc, "spec", "selector", "matchLabels"), dig(svc.doc, "metadata", "labels")) {
				for _, p := range list(dig(svc.doc, "spec", "ports")) {
					for _, e := range list(dig(sm.doc, "spec", "endpoints")) {
						found = found || str(dig(p, "name")) == str(dig(e, "port"))
					}
				}
			}
		}
		if !found {
			t.Errorf("ServiceMonitor %s: no Service port it selects", sm.name())
		}
	}
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

func intOf(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case float64:
		return int(n)
	}
	return -1
}

// TestDockerfileBuildsTheBinary checks the Dockerfile builds ./cmd/allot
// statically: docker itself is not on this machine.
func TestDockerfileBuildsTheBinary(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/allot", "ENTRYPOINT"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}
