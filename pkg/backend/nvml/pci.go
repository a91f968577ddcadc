package nvml

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// busDevFn is the bus:device.function part of a PCI address.
var busDevFn = regexp.MustCompile(`^[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$`)

// NormalizePCIBusID turns NVML's bus ID, "00000000:17:00.0" (8-digit domain, upper-case hex),
// into the extended BDF that sysfs and the standard pciBusID attribute use, "0000:17:00.0".
// Domains above 0xffff (Intel VMD) keep their extra digits, as in sysfs.
func NormalizePCIBusID(nvmlBusID string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(nvmlBusID))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || !busDevFn.MatchString(rest) || dom == "" || len(dom) > 8 {
		return "", fmt.Errorf("invalid PCI bus ID %q", nvmlBusID)
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return "", fmt.Errorf("invalid PCI domain in bus ID %q: %w", nvmlBusID, err)
	}
	return fmt.Sprintf("%04x:%s", d, rest), nil
}
