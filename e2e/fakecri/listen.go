package fakecri

import (
	"fmt"
	"net"
)

func listenUnix(path string) (net.Listener, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on CRI socket %s: %w", path, err)
	}
	return l, nil
}
