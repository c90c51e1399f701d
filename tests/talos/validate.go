// talos-validate: gpulet's machine-config patches checked by Talos' own configuration code.
//
// Built once per Talos release against github.com/siderolabs/talos/pkg/machinery at that
// release's tag (scripts/e2e/build.sh --talos; the binary is talos-validate-vX.Y), so each
// check is exactly what that release's `talosctl` and machined accept: configpatcher applies
// the patches (strategic merge, `$patch: delete`, multi-document), configloader reads the
// result back, and Validate runs every document's own rules and the conflicts between the
// v1alpha1 document and the newer ones (V1Alpha1ConflictValidate).
//
//	talos-validate [--base generated|FILE] [--type worker|controlplane] [--out FILE] [PATCH-FILE...]
//
// --base generated (the default) starts from the configuration this release's
// `talosctl gen config` writes; FILE starts from an existing one (a node's, as another
// release left it). Exit 0: valid (warnings on stderr); 1: refused, with Talos' own message;
// 2: bad usage or unreadable input. Used by src/node/talos_machinery_test.cc.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// metal is the runtime mode of a node installed on hardware, as `talosctl validate --mode metal`.
type metal struct{}

func (metal) String() string        { return "metal" }
func (metal) RequiresInstall() bool { return true }
func (metal) InContainer() bool     { return false }

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "talos-validate: "+format+"\n", args...)
	os.Exit(code)
}

func main() {
	base := flag.String("base", "generated", "generated, or a machine configuration file")
	typ := flag.String("type", "worker", "worker or controlplane (for --base generated)")
	out := flag.String("out", "", "write the patched configuration here")
	flag.Parse()

	var cfg config.Provider
	var err error
	if *base == "generated" {
		t, perr := machine.ParseType(*typ)
		if perr != nil {
			fail(2, "--type %q: %v", *typ, perr)
		}
		// As `talosctl gen config gpulet https://10.5.0.2:6443` writes it (its default install disk).
		in, gerr := generate.NewInput("gpulet", "https://10.5.0.2:6443", constants.DefaultKubernetesVersion,
			generate.WithInstallDisk("/dev/sda"))
		if gerr != nil {
			fail(2, "generating the input: %v", gerr)
		}
		cfg, err = in.Config(t)
		if err != nil {
			fail(2, "generating the %s configuration: %v", *typ, err)
		}
	} else {
		cfg, err = configloader.NewFromFile(*base)
		if err != nil {
			// An existing configuration this release cannot read is a refusal, not a usage error.
			fail(1, "%s: %v", *base, err)
		}
	}

	if flag.NArg() > 0 {
		specs := make([]string, 0, flag.NArg())
		for _, p := range flag.Args() {
			specs = append(specs, "@"+p)
		}
		patches, perr := configpatcher.LoadPatches(specs)
		if perr != nil {
			fail(1, "loading the patches: %v", perr)
		}
		applied, aerr := configpatcher.Apply(configpatcher.WithConfig(cfg), patches)
		if aerr != nil {
			fail(1, "applying the patches: %v", aerr)
		}
		// Read back as bytes, as a node does when the patched configuration reaches it.
		raw, berr := applied.Bytes()
		if berr != nil {
			fail(1, "encoding the patched configuration: %v", berr)
		}
		cfg, err = configloader.NewFromBytes(raw)
		if err != nil {
			fail(1, "loading the patched configuration: %v", err)
		}
	}

	warnings, verr := cfg.Validate(metal{}, validation.WithLocal())
	for _, w := range warnings {
		fmt.Fprintf(os.Stderr, "warning: %s\n", w)
	}
	if verr != nil {
		fail(1, "invalid: %s", strings.ReplaceAll(verr.Error(), "\n", " "))
	}
	if *out != "" {
		text, eerr := cfg.EncodeString()
		if eerr != nil {
			fail(1, "encoding: %v", eerr)
		}
		if werr := os.WriteFile(*out, []byte(text), 0o600); werr != nil {
			fail(2, "%s: %v", *out, werr)
		}
	}
	fmt.Println("valid")
}
