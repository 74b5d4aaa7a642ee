package main

// m2n topo: the GPUs and links of this machine, as m2n sees them.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/m2n-project/m2n/native"
)

func runTopo(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "topo", "[flags]",
		`List the GPUs NVML sees: name, memory, PCI bus id, active NVLink links and
their speed, and NVLink domain (fabric cluster and clique where the GPU reports
one); then the [topology] table m2n would use for them.`)
	asJSON := fs.Bool("json", false, "print JSON on stdout")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("topo takes no arguments, got %s", strings.Join(pos, " "))
	}
	gpus, err := native.Inventory()
	if err != nil {
		if errors.Is(err, native.ErrNotSupported) {
			return fmt.Errorf("m2n topo needs a GPU build (linux, cgo) and NVML: %w", err)
		}
		return err
	}
	if *asJSON {
		return printJSON(e.stdout, native.InventoryJSON(gpus))
	}
	return native.WriteInventory(e.stdout, gpus)
}
