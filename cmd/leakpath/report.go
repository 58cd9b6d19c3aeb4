package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/leakpath/leakpath/internal/event"
	"github.com/leakpath/leakpath/internal/heap"
	"github.com/leakpath/leakpath/internal/report"
	"github.com/leakpath/leakpath/internal/tracefile"
)

type reportOptions struct {
	format    string
	output    string
	debugDirs commaList
}

func reportFlags(o *reportOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.format, "format", "text", "output `format`: text or json")
	fs.StringVar(&o.output, "output", "", "write to `FILE` instead of stdout")
	fs.Var(&o.debugDirs, "debug-dir", "look for separate debug files under `DIR` too (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath report [flags] TRACE.lpt\n\n"+
			"Reads a trace kept with 'leakpath run -o TRACE.lpt' and prints the same report\n"+
			"as the run did. A trace cut short (the program or leakpath was killed) is\n"+
			"reported up to its last complete record, with a warning.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// reportTrace replays a trace into the model and reports it.
func reportTrace(path string, o *reportOptions, stdout, stderr io.Writer) error {
	if o.format != "text" && o.format != "json" {
		return fmt.Errorf("--format %q: want text or json", o.format)
	}
	r, err := tracefile.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	model := heap.NewSession()
	var warnings []string
	var buf []event.Event
	main := int32(-1)
	var tps float64
	for {
		buf, err = r.Next(buf)
		for i := range buf {
			ev := &buf[i]
			if ev.Kind == event.ProcessStart && main < 0 {
				main = int32(ev.Proc)
			}
			if ev.ClockInfo() != nil && ev.ClockInfo().TicksPerSec > 0 {
				tps = ev.ClockInfo().TicksPerSec
			}
		}
		model.Apply(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			if !errors.Is(err, tracefile.ErrTruncated) {
				var ce *tracefile.CorruptError
				if !errors.As(err, &ce) {
					return fmt.Errorf("%s: %w", path, err)
				}
			}
			warnings = append(warnings, fmt.Sprintf("%s: %v; reporting what came before", path, err))
			model.Finish()
			break
		}
	}
	// The main program's last image: the latest one of the first pid.
	if main >= 0 {
		pid := model.Procs[main].Info.PID
		for i, p := range model.Procs {
			if p != nil && p.Info.PID == pid {
				main = int32(i)
			}
		}
	}
	out := stdout
	if o.output != "" {
		f, err := os.Create(o.output)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	var rep *report.Report
	sym := newSymbolizer(o.debugDirs, func(msg string) { rep.Warn(msg) })
	defer sym.close()
	rep = report.New(model, main, report.Options{
		Symbolize: sym.lookup, TicksPerSec: tps, Warnings: warnings, TracePath: path,
	})
	return rep.Generate(out, o.format)
}
