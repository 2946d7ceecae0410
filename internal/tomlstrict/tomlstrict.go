// Package tomlstrict decodes the TOML files reservoir reads (the topology,
// the plan, the clients file) strictly: a key the target does not have is
// an error naming it, because a typo must not silently route traffic,
// skip a gate or drop a client's restriction.
package tomlstrict

import (
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"
)

// Decode decodes data into v and refuses keys v has no field for.
func Decode(data []byte, v any) error {
	md, err := toml.Decode(string(data), v)
	if err != nil {
		return err
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return fmt.Errorf("unknown key(s): %s", strings.Join(keys, ", "))
	}
	return nil
}
