//go:build !amd64

package clock

func rdtsc() uint64 { return 0 }

const haveTSC = false
