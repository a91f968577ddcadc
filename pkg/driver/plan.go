package driver

import (
	"encoding/json"
	"fmt"
	stdslices "slices"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"

	configapi "github.com/accel-dra/accel-dra/api/v1alpha1"
	"github.com/accel-dra/accel-dra/pkg/cdi"
	"github.com/accel-dra/accel-dra/pkg/checkpoint"
)

// plan checks a claim's allocation against this node and resolves its configuration, without
// side effects.
func (p *preparer) plan(claim *resourceapi.ResourceClaim) (*checkpoint.Claim, error) {
	ref := klog.KObj(claim).String()
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s is not allocated", ref)
	}
	rec := &checkpoint.Claim{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name, State: checkpoint.StatePrepareStarted}
	var requests []string
	// migRequests are the requests whose devices are MIG devices (ConfigApplies).
	migRequests := map[string]bool{}
	firstOfRequest := map[string]bool{}
	shared := false // a result is a share of a device
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != p.n.opts.DriverName {
			continue
		}
		if r.Pool != p.n.opts.NodeName {
			return nil, fmt.Errorf("claim %s: device %s/%s is allocated from pool %q, not from this node's pool %q", ref, r.Pool, r.Device, r.Pool, p.n.opts.NodeName)
		}
		if _, ok := p.n.devices[r.Device]; !ok {
			return nil, fmt.Errorf("claim %s: device %s is not on node %s", ref, r.Device, p.n.opts.NodeName)
		}
		if !p.n.publishable[r.Device] {
			return nil, fmt.Errorf("claim %s: device %s on node %s is not published (it failed validation) and cannot be prepared", ref, r.Device, p.n.opts.NodeName)
		}
		dev := p.n.devices[r.Device]
		rec.Devices = append(rec.Devices, checkpoint.PreparedDevice{
			Request:      r.Request,
			Pool:         r.Pool,
			Device:       r.Device,
			CDIDeviceIDs: cdi.ResultIDs(p.n.kind, string(claim.UID), r.Request, r.Device, !firstOfRequest[resourceclaim.BaseRequestRef(r.Request)]),
			UUID:         dev.UUID,
			Nodes:        stdslices.Clone(dev.Nodes),
			AdminAccess:  r.AdminAccess != nil && *r.AdminAccess,
		})
		if dev.MIG != nil && dev.MIG.Dynamic {
			rec.Devices[len(rec.Devices)-1].MIG = migIntent(dev)
		}
		if r.ShareID != nil {
			share(&rec.Devices[len(rec.Devices)-1], &r)
			shared = true
		}
		firstOfRequest[resourceclaim.BaseRequestRef(r.Request)] = true
		requests = append(requests, r.Request)
		migRequests[r.Request] = migRequests[r.Request] || dev.MIG != nil
	}
	env, share, err := p.resolveConfig(ref, claim.Status.Allocation.Devices.Config, requests, migRequests)
	if err != nil {
		return nil, err
	}
	// The sharing step plans only a claim that shares a GPU or asks for a sharing strategy.
	if share != nil || shared {
		extra, err := p.sharing.plan(ref, rec, share)
		if err != nil {
			return nil, err
		}
		env = append(env, extra...)
	}
	rec.Env = env
	return rec, nil
}

// resolveConfig finds the effective opaque configuration of each request: class configs first,
// then claim configs, the later one winning. One CDI spec per claim carries one environment,
// so requests of one claim that resolve to different settings are refused rather than given a
// container environment that would be wrong for one of them.
func (p *preparer) resolveConfig(ref string, configs []resourceapi.DeviceAllocationConfiguration, requests []string, migRequests map[string]bool) ([]string, *configapi.Sharing, error) {
	ordered := append([]resourceapi.DeviceAllocationConfiguration(nil), configs...)
	sort.SliceStable(ordered, func(i, j int) bool {
		return ordered[i].Source == resourceapi.AllocationConfigSourceClass && ordered[j].Source != resourceapi.AllocationConfigSourceClass
	})
	var env []string
	var envFrom string
	var share *configapi.Sharing
	for _, req := range stdslices.Compact(stdslices.Sorted(stdslices.Values(requests))) {
		var raws [][]byte
		for _, c := range ordered {
			if c.Opaque == nil || c.Opaque.Driver != p.n.opts.DriverName || !appliesTo(c.Requests, req) {
				continue
			}
			raw := c.Opaque.Parameters.Raw
			if len(c.Requests) == 0 && p.n.opts.ConfigApplies != nil && !p.n.opts.ConfigApplies(raw, migRequests[req]) {
				continue
			}
			if p.n.opts.ConfigTranslator != nil {
				var err error
				if raw, err = p.n.opts.ConfigTranslator(raw); err != nil {
					// The position is the one configapi.Resolve would name, class entries first.
					return nil, nil, fmt.Errorf("claim %s: request %s: invalid configuration for driver %s: config[%d]: %w", ref, req, p.n.opts.DriverName, len(raws), err)
				}
			}
			raws = append(raws, raw)
		}
		cfg, err := configapi.Resolve(p.n.kind, raws)
		if err != nil {
			return nil, nil, fmt.Errorf("claim %s: request %s: invalid configuration for driver %s: %w", ref, req, p.n.opts.DriverName, err)
		}
		e, sh := cfg.Env(), sharingOf(cfg)
		if envFrom == "" {
			env, share, envFrom = e, sh, req
			continue
		}
		if strings.Join(e, "\n") != strings.Join(env, "\n") || !sameSharing(sh, share) {
			return nil, nil, fmt.Errorf("claim %s: requests %s and %s resolve to different configurations; one claim's devices share one container environment, so put them in separate claims", ref, envFrom, req)
		}
	}
	return env, share, nil
}

// appliesTo reports whether a config naming requests covers request req. A config that names
// a request also covers its subrequests ("req/sub").
func appliesTo(names []string, req string) bool {
	if len(names) == 0 {
		return true
	}
	for _, n := range names {
		if n == req || n == resourceclaim.BaseRequestRef(req) {
			return true
		}
	}
	return false
}

// sharingOf is a config's GpuConfig.sharing, nil for none or for another kind.
func sharingOf(cfg configapi.Config) *configapi.Sharing {
	if g, ok := cfg.(*configapi.GpuConfig); ok {
		return g.Sharing
	}
	return nil
}

// sameSharing compares two sharing configs by their encoding: quantities that are equal may
// differ in their cached string.
func sameSharing(a, b *configapi.Sharing) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && string(ja) == string(jb)
}
