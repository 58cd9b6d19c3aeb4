package report_test

import (
	"os"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

// The end-to-end tests here run the leakpath binary through the shared
// harness, which builds it (once for all test binaries) before they run.
func TestMain(m *testing.M) { os.Exit(e2e.Main(m)) }
