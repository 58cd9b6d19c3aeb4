package main

import (
	"os"
	"runtime"
	"runtime/debug"
)

// firstGCPercent is the garbage collector's GOGC until its first
// collection, when leakpath's own setting (GOGC) is not given: the first
// collection then comes at 4 MB × firstGCPercent/100 of heap instead of
// 4 MB, after most short runs have ended.
const firstGCPercent = 200

// delayFirstGC makes the first collection come later (see firstGCPercent);
// from the first on, collections run as with GOGC=100.
func delayFirstGC() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	debug.SetGCPercent(firstGCPercent)
	// A finalizer runs after the first collection that finds its object
	// unreachable: this one is unreachable from the start. (Not a tiny
	// object: those share blocks, and their finalizers may never run.)
	runtime.SetFinalizer(&struct {
		p *int
		_ [16]byte
	}{}, func(any) { debug.SetGCPercent(100) })
}
