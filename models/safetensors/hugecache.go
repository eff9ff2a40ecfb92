package safetensors

import "time"

// HugeShareWanted is the share of a file's whole 2 MiB pages that SettleHugePages accepts
// as mapped with 2 MiB entries; below it the file is read again.
const HugeShareWanted = 0.95

// CachedShareWanted is the share of a file that must be in the page cache for
// SettleHugePages to look at it: a file mostly on disk comes in through the 2 MiB mapping
// as it is read, in 2 MiB folios, and mapping it all in at open would read it whole
// before the first token instead of the parts the first tokens need.
const CachedShareWanted = 0.9

// PageCacheReport is what SettleHugePages found of one file in the page cache, and did.
type PageCacheReport struct {
	Path string
	// Bytes is the file's size; Hugeable its bytes in whole 2 MiB pages, which a 2 MiB
	// mapping can map with 2 MiB entries (a last partial page never can).
	Bytes, Hugeable int64
	// Cached is the file's bytes the page cache held when it was looked at.
	Cached int64
	// LeftToRead says the file was mostly not cached (less than CachedShareWanted), so it
	// was left to come in as it is read (Skipped says so), with Before and After zero.
	LeftToRead bool
	// Before and After are the file's bytes mapped with 2 MiB entries once every page is
	// mapped in, before and after any reread.
	Before, After int64
	// Reread says the file's pages were dropped from the page cache and read again.
	Reread bool
	// Skipped says why the file was left as it was, when it was not settled ("" when it
	// was, or needed nothing).
	Skipped string
	// Took is the time spent on the file.
	Took time.Duration
}
