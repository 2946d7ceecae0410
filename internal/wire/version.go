package wire

import "time"

// Version is what `reservoir version --json` prints: which build this
// binary is.
type Version struct {
	// Version is the release the binary was built as (the build's
	// -ldflags "-X github.com/seed31b0e981/reservoir/internal/cli.Version=v1.2.3";
	// the Dockerfile's VERSION build argument), "devel" when not set.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from (Go's
	// vcs.revision, else the build's -X ...internal/cli.Revision, the
	// Dockerfile's REVISION build argument); "" when unknown.
	Revision string `json:"revision"`
	// Modified is true when the working tree had changes not committed at
	// Revision (Go's vcs.modified); false when clean or unknown.
	Modified bool `json:"modified"`
	// Time is the commit time of Revision (Go's vcs.time); left out when
	// unknown.
	Time time.Time `json:"time,omitzero"`
	// GoVersion is the Go toolchain that built the binary ("go1.26.0").
	GoVersion string `json:"go_version"`
	// Platform is the binary's GOOS/GOARCH ("linux/amd64").
	Platform string `json:"platform"`
	// Module is the main module's path.
	Module string `json:"module"`
}
