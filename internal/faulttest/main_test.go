package faulttest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seed31b0e981/reservoir/internal/testproc"
)

// EnvLong, when "1", runs the matrix with long phases (as -long does).
const EnvLong = "RESERVOIR_FAULT_LONG"

var long = flag.Bool("long", false, "run the fault matrix with long phases (minutes per cell) instead of the CI ones")

// cellParallelism is how many matrix cells run at once unless -parallel is
// given. A cell spends most of its wall time waiting (for the fault window,
// for holds to expire), not computing, so more cells than cores keep the
// matrix within its CI budget on a 2-core machine.
const cellParallelism = 8

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit && runtime.GOMAXPROCS(0) < cellParallelism {
		if err := flag.Set("test.parallel", fmt.Sprint(cellParallelism)); err != nil {
			panic(err)
		}
	}
	// go-redis logs every failed dial; under a "down" fault that is
	// hundreds of lines saying what the cell report already counts.
	redis.SetLogger(quiet{})
	_ = mysql.SetLogger(quiet{})
	code := m.Run()
	testproc.RemoveTemplate()
	os.Exit(code)
}

func longRun() bool { return *long || os.Getenv(EnvLong) == "1" }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
func (quiet) Print(...any)                           {}
