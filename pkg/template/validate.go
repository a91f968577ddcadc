package template

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/accel-dra/accel-dra/pkg/apivalidation"
)

// validate checks that every ResourceSlice the template produces would pass the API server's
// validation (for any valid node name), that cross-references inside each pool hold, and that
// the template is within the format's limits: the reader's checks (apitemplate.Template.Validate)
// and then the API server's rules for every device, including the fields that only this
// module's k8s.io/api has (k8s.io/kubernetes/pkg/apis/resource/validation, v1.37). What they
// leave out is listed in docs/template-format.md.
func (t *Template) validate() error {
	if err := t.api().Validate(); err != nil {
		return err
	}
	for i := range t.Drivers {
		d := &t.Drivers[i]
		if err := validateDriver(d); err != nil {
			return fmt.Errorf("driver %s pool suffix %q: %w", d.Name, d.PoolSuffix, err)
		}
	}
	return nil
}

func validateDriver(d *Driver) error {
	ops := make([]resourceapi.SkipNodeOperation, len(d.SkipNodeOperations))
	for i, op := range d.SkipNodeOperations {
		ops[i] = resourceapi.SkipNodeOperation(op)
	}
	if err := apivalidation.SkipNodeOperations(ops); err != nil {
		return fmt.Errorf("skipNodeOperations: %w", err)
	}
	for i := range d.Devices {
		if err := apivalidation.Device(&d.Devices[i]); err != nil {
			return fmt.Errorf("device %q: %w", d.Devices[i].Name, err)
		}
	}
	return nil
}
