package symbolize

import (
	"debug/elf"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// EmbeddedDWARF reports whether the ELF file at path carries DWARF debug
// information in its own bytes, as code compiled with -g does (a
// distribution's library has its debug information, if installed, in a
// separate file). False when it is no regular ELF file or cannot be read.
// The path comes from the target: it is opened without blocking (a FIFO
// put there cannot hang the caller) and only a regular file is read.
func EmbeddedDWARF(path string) bool {
	var ok bool
	err := func() (err error) {
		defer guard(&err, "symbolize: "+path)
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != nil {
			return err
		}
		osf := os.NewFile(uintptr(fd), path)
		defer osf.Close()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("not a regular file")
		}
		f, err := elf.NewFile(osf)
		if err != nil {
			return err
		}
		ok = hasDWARF(f)
		return nil
	}()
	return ok && err == nil
}
