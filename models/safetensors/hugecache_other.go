//go:build !linux

package safetensors

// SettleHugePages does nothing off Linux: no 2 MiB mappings of the page cache to settle.
func (s *Set) SettleHugePages(rereading func(path string, done, total int64)) ([]PageCacheReport, error) {
	return nil, nil
}
