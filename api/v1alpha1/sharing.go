package v1alpha1

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SharingStrategy is how the processes of a claim's containers share each of its GPUs
// (docs/sharing.md).
type SharingStrategy string

const (
	// StrategyTimeSlicing: CUDA's time-slicing between processes, with an interval the plugin
	// sets on the GPU (nvidia-smi compute-policy --set-timeslice) while the claim is prepared.
	StrategyTimeSlicing SharingStrategy = "TimeSlicing"
	// StrategyMPS: NVIDIA's Multi-Process Service, one control daemon per prepared claim.
	StrategyMPS SharingStrategy = "MPS"
)

// SupportedStrategies lists the values Sharing.Strategy accepts.
var SupportedStrategies = []string{string(StrategyMPS), string(StrategyTimeSlicing)}

// TimeSliceInterval is a GPU's time-slice length, as nvidia-smi compute-policy names them.
type TimeSliceInterval string

const (
	TimeSliceDefault TimeSliceInterval = "Default"
	TimeSliceShort   TimeSliceInterval = "Short"
	TimeSliceMedium  TimeSliceInterval = "Medium"
	TimeSliceLong    TimeSliceInterval = "Long"
)

// SupportedTimeSliceIntervals lists the values TimeSlicing.Interval accepts, in the order of
// their nvidia-smi numbers 0..3.
var SupportedTimeSliceIntervals = []string{string(TimeSliceDefault), string(TimeSliceShort), string(TimeSliceMedium), string(TimeSliceLong)}

// SMINumber is the interval's argument to nvidia-smi compute-policy --set-timeslice: 0 (Default)
// to 3 (Long); -1 for a value Validate refuses.
func (i TimeSliceInterval) SMINumber() int {
	return slices.Index(SupportedTimeSliceIntervals, string(i))
}

// Sharing configures how a claim's GPUs are shared between the processes of the containers that
// use the claim.
type Sharing struct {
	// Strategy is TimeSlicing or MPS. Required.
	Strategy SharingStrategy `json:"strategy"`
	// TimeSlicing settings; only with strategy TimeSlicing. Default: interval Default.
	TimeSlicing *TimeSlicing `json:"timeSlicing,omitempty"`
	// MPS settings; only with strategy MPS.
	MPS *MPS `json:"mps,omitempty"`
}

// TimeSlicing configures time-slicing.
type TimeSlicing struct {
	// Interval is Default, Short, Medium or Long. Default: Default.
	Interval TimeSliceInterval `json:"interval,omitempty"`
}

// MPS configures the claim's MPS control daemon.
type MPS struct {
	// DefaultActiveThreadPercentage limits each client to this share of the GPU's
	// multiprocessors, 1 to 100 (set_default_active_thread_percentage).
	DefaultActiveThreadPercentage *int32 `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemoryLimit limits each client's device memory on every GPU of the
	// claim (set_default_device_pinned_mem_limit); more than zero.
	DefaultPinnedDeviceMemoryLimit *resource.Quantity `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	// DefaultPerDevicePinnedMemoryLimit overrides DefaultPinnedDeviceMemoryLimit for the GPUs it
	// names, by device name as the ResourceSlice has it ("gpu-3"); a name that is not one of
	// the claim's devices is refused when the claim is prepared.
	DefaultPerDevicePinnedMemoryLimit map[string]resource.Quantity `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
}

// Default fills in a TimeSlicing strategy's interval.
func (s *Sharing) Default() {
	if s.Strategy == StrategyTimeSlicing {
		if s.TimeSlicing == nil {
			s.TimeSlicing = &TimeSlicing{}
		}
		if s.TimeSlicing.Interval == "" {
			s.TimeSlicing.Interval = TimeSliceDefault
		}
	}
}

// Validate checks s, naming each bad field under path.
func (s *Sharing) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case s.Strategy == "":
		errs = append(errs, field.Required(path.Child("strategy"), "must be one of "+string(StrategyTimeSlicing)+", "+string(StrategyMPS)))
	case !slices.Contains(SupportedStrategies, string(s.Strategy)):
		errs = append(errs, field.NotSupported(path.Child("strategy"), s.Strategy, SupportedStrategies))
	}
	if s.TimeSlicing != nil {
		p := path.Child("timeSlicing")
		if s.Strategy != StrategyTimeSlicing {
			errs = append(errs, field.Forbidden(p, "only with strategy "+string(StrategyTimeSlicing)))
		} else if s.TimeSlicing.Interval.SMINumber() < 0 {
			errs = append(errs, field.NotSupported(p.Child("interval"), s.TimeSlicing.Interval, SupportedTimeSliceIntervals))
		}
	}
	if s.MPS != nil {
		p := path.Child("mps")
		if s.Strategy != StrategyMPS {
			errs = append(errs, field.Forbidden(p, "only with strategy "+string(StrategyMPS)))
		}
		if v := s.MPS.DefaultActiveThreadPercentage; v != nil && (*v < 1 || *v > 100) {
			errs = append(errs, field.Invalid(p.Child("defaultActiveThreadPercentage"), *v, "must be between 1 and 100"))
		}
		if q := s.MPS.DefaultPinnedDeviceMemoryLimit; q != nil && q.Sign() <= 0 {
			errs = append(errs, field.Invalid(p.Child("defaultPinnedDeviceMemoryLimit"), q.String(), "must be more than zero"))
		}
		names := make([]string, 0, len(s.MPS.DefaultPerDevicePinnedMemoryLimit))
		for name := range s.MPS.DefaultPerDevicePinnedMemoryLimit {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			kp := p.Child("defaultPerDevicePinnedMemoryLimit").Key(name)
			for _, msg := range validation.IsDNS1123Label(name) {
				errs = append(errs, field.Invalid(kp, name, "must be a device name: "+msg))
			}
			if q := s.MPS.DefaultPerDevicePinnedMemoryLimit[name]; q.Sign() <= 0 {
				errs = append(errs, field.Invalid(kp, q.String(), "must be more than zero"))
			}
		}
	}
	return errs
}

// DeepCopy returns a copy of s that shares nothing with it.
func (s *Sharing) DeepCopy() *Sharing {
	if s == nil {
		return nil
	}
	out := *s
	if s.TimeSlicing != nil {
		ts := *s.TimeSlicing
		out.TimeSlicing = &ts
	}
	if s.MPS != nil {
		m := *s.MPS
		if m.DefaultActiveThreadPercentage != nil {
			v := *m.DefaultActiveThreadPercentage
			m.DefaultActiveThreadPercentage = &v
		}
		if m.DefaultPinnedDeviceMemoryLimit != nil {
			q := m.DefaultPinnedDeviceMemoryLimit.DeepCopy()
			m.DefaultPinnedDeviceMemoryLimit = &q
		}
		if m.DefaultPerDevicePinnedMemoryLimit != nil {
			per := make(map[string]resource.Quantity, len(m.DefaultPerDevicePinnedMemoryLimit))
			for k, v := range m.DefaultPerDevicePinnedMemoryLimit {
				per[k] = v.DeepCopy()
			}
			m.DefaultPerDevicePinnedMemoryLimit = per
		}
		out.MPS = &m
	}
	return &out
}
