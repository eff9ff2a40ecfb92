//go:build !darwin

package metal

// SelfTest needs a Mac with Apple silicon.
func SelfTest() (*Report, error) { return nil, ErrUnavailable }
