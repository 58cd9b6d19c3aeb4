package clock

func rdtsc() uint64

const haveTSC = true
