package main

// The CLI is the only importer of every backend; each registers itself with exec.
import (
	_ "pistil/cpu"
	_ "pistil/cuda"
	_ "pistil/metal"
)
