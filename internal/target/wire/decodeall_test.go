package wire

import "github.com/leakpath/leakpath/internal/model/event"

// Decode appends to out the events of the whole records in b, tagged with
// process index proc, and returns the extended slice: DecodeSome over the
// whole of b, for the tests. b must hold whole
// records (a ring publishes only whole records). On a malformed record it
// returns the events before it and a *DecodeError.
func Decode(b []byte, proc uint32, r *Ring, out []event.Event) ([]event.Event, error) {
	done := 0
	for {
		// Room for as many events as the bytes likely hold, at once:
		// growing by appending would copy them again and again.
		if most := (len(b) - done) / 24; cap(out)-len(out) < most {
			out = append(make([]event.Event, 0, max(len(out)+most, cap(out)*3/2)), out...)
		} else if len(out) == cap(out) {
			out = append(out, event.Event{})[:len(out)]
		}
		var n int
		var err error
		out, n, err = DecodeSome(b[done:], proc, r, out)
		if err != nil {
			err.(*DecodeError).Offset += done
			return out, err
		}
		if done += n; done == len(b) {
			return out, nil
		}
	}
}
