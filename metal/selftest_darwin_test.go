//go:build darwin

package metal

import "testing"

// On a Mac (or a macOS CI runner) the self-test's device checks are a test: every one must
// pass. A machine without a usable Metal device (some VMs) skips with the reason.
func TestSelfTestOnThisMac(t *testing.T) {
	r, err := SelfTest()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Checks) == 1 && !r.Checks[0].Pass {
		t.Skipf("no usable Metal device: %s", r.Checks[0].Detail)
	}
	r.Finish()
	for _, c := range r.Checks {
		if !c.Pass {
			t.Errorf("%s: %s", c.Name, c.Detail)
		} else {
			t.Logf("ok %s %s", c.Name, c.Detail)
		}
	}
}
