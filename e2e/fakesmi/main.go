// Command fakesmi is the stand-in for nvidia-smi on mock nodes (docs/sharing.md): it accepts the
// one command the plugin runs, `compute-policy -i <uuid> --set-timeslice <0..3>`, and appends
// what it was asked to <its own path>.calls, one line per call ("<uuid> <n>"), so that tests can
// see which interval each GPU got and in which order. Anything else fails as nvidia-smi would
// on an unknown option. FAKESMI_FAIL_UUID=<uuid> makes calls for that GPU fail, as on a GPU
// that does not support compute policies.
package main

import (
	"fmt"
	"os"
	"strconv"
)

func main() {
	a := os.Args[1:]
	if len(a) != 5 || a[0] != "compute-policy" || a[1] != "-i" || a[3] != "--set-timeslice" {
		fmt.Fprintf(os.Stderr, "fakesmi: unsupported arguments %q\n", a)
		os.Exit(2)
	}
	uuid := a[2]
	n, err := strconv.Atoi(a[4])
	if err != nil || n < 0 || n > 3 {
		fmt.Fprintf(os.Stderr, "fakesmi: invalid time-slice %q\n", a[4])
		os.Exit(2)
	}
	if uuid == os.Getenv("FAKESMI_FAIL_UUID") {
		fmt.Fprintf(os.Stderr, "Setting time-slice is not supported for GPU %s.\n", uuid)
		os.Exit(3)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakesmi:", err)
		os.Exit(1)
	}
	f, err := os.OpenFile(exe+".calls", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintf(f, "%s %d\n", uuid, n)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakesmi:", err)
		os.Exit(1)
	}
	fmt.Printf("Set time-slice to %d for GPU %s.\n", n, uuid)
}
