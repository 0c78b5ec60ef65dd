package pkcs11

import "fmt"

// mechanismName returns the CKM_ name of mech (mechanisms_table.go), or
// its hex value for vendor-defined and unknown mechanisms.
func mechanismName(mech uint) string {
	if n, ok := mechanismNames[mech]; ok {
		return n
	}
	return fmt.Sprintf("0x%08X", mech)
}
