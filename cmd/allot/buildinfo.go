package main

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version is set at build time with -ldflags "-X main.version=..."; a
// build from a module version (go install …@v1.2.3) reports that instead
// of "dev".
var version = "dev"

// buildInfo is what this binary knows of how it was built.
type buildInfo struct {
	version, revision, goVersion string
	modified                     bool // built from a tree with changes not committed
}

// readBuildInfo reads the version, the VCS revision and the Go version
// the binary was built with (debug.ReadBuildInfo).
func readBuildInfo() buildInfo {
	b := buildInfo{version: version, revision: "unknown", goVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := info.Main.Version; version == "dev" && v != "" && v != "(devel)" {
		b.version = v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.revision = s.Value
		case "vcs.modified":
			b.modified = s.Value == "true"
		}
	}
	return b
}

func (b buildInfo) String() string {
	rev := b.revision
	if b.modified {
		rev += " (modified)"
	}
	return "allot " + b.version + ", revision " + rev + ", " + b.goVersion
}

// buildInfoGauge is allot_build_info{version,revision,goversion} 1, so
// that dashboards can tell which build each process runs.
func buildInfoGauge() prometheus.Collector {
	b := readBuildInfo()
	rev := b.revision
	if b.modified {
		rev += "-modified"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "allot_build_info", Help: "1, labelled with the version, VCS revision and Go version this process was built with.",
		ConstLabels: prometheus.Labels{"version": b.version, "revision": rev, "goversion": b.goVersion},
	})
	g.Set(1)
	return g
}
