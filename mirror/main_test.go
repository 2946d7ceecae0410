package mirror_test

import (
	"os"
	"testing"

	"github.com/seed31b0e981/reservoir/internal/testtier"
)

// TestMain skips, under -short, the examples that need servers: an
// example cannot skip itself (testtier.SkipExamples).
func TestMain(m *testing.M) {
	testtier.SkipExamples("MariaDB and Redis (RESERVOIR_MYSQL_DSN, RESERVOIR_REDIS_ADDR)", "ExampleMirror_Handoff", "ExampleMirror_Run")
	os.Exit(m.Run())
}
