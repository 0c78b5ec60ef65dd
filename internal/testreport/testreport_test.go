package testreport

import (
	"strings"
	"testing"
)

const sample = `{"Action":"start","Package":"github.com/keysvc/keysvc/backends/pkcs11"}
{"Action":"run","Package":"github.com/keysvc/keysvc/backends/pkcs11","Test":"TestSign"}
{"Action":"output","Package":"github.com/keysvc/keysvc/backends/pkcs11","Test":"TestSign","Output":"=== RUN   TestSign\n"}
{"Action":"output","Package":"github.com/keysvc/keysvc/backends/pkcs11","Test":"TestSign","Output":"    softhsmtest.go:70: SKIPPING PKCS#11 tests: SoftHSM2 missing\n"}
{"Action":"output","Package":"github.com/keysvc/keysvc/backends/pkcs11","Test":"TestSign","Output":"--- SKIP: TestSign (0.00s)\n"}
{"Action":"skip","Package":"github.com/keysvc/keysvc/backends/pkcs11","Test":"TestSign","Elapsed":0}
{"Action":"run","Package":"github.com/keysvc/keysvc/backends/pkcs11","Test":"TestOK"}
{"Action":"output","Package":"github.com/keysvc/keysvc/backends/pkcs11","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"github.com/keysvc/keysvc/backends/pkcs11","Test":"TestOK","Elapsed":0}
{"Action":"output","Package":"github.com/keysvc/keysvc/backends/pkcs11","Output":"ok  \tgithub.com/keysvc/keysvc/backends/pkcs11\t0.01s\n"}
{"Action":"pass","Package":"github.com/keysvc/keysvc/backends/pkcs11","Elapsed":0.01}
{"Action":"run","Package":"github.com/keysvc/keysvc/backends/awskms","Test":"TestLiveAWSKMS"}
{"Action":"output","Package":"github.com/keysvc/keysvc/backends/awskms","Test":"TestLiveAWSKMS","Output":"    live_test.go:29: SKIPPING live AWS KMS test\n"}
{"Action":"skip","Package":"github.com/keysvc/keysvc/backends/awskms","Test":"TestLiveAWSKMS","Elapsed":0}
{"Action":"run","Package":"github.com/keysvc/keysvc/store","Test":"TestBroken"}
{"Action":"output","Package":"github.com/keysvc/keysvc/store","Test":"TestBroken","Output":"    store_test.go:9: got 1, want 2\n"}
{"Action":"output","Package":"github.com/keysvc/keysvc/store","Test":"TestBroken","Output":"--- FAIL: TestBroken (0.00s)\n"}
{"Action":"fail","Package":"github.com/keysvc/keysvc/store","Test":"TestBroken","Elapsed":0}
{"Action":"fail","Package":"github.com/keysvc/keysvc/store","Elapsed":0.02}
# github.com/keysvc/keysvc/broken
`

func TestReadAndAllow(t *testing.T) {
	var human strings.Builder
	rep, err := Read(strings.NewReader(sample), &human)
	if err != nil {
		t.Fatal(err)
	}
	wantHuman := "--- SKIP: TestSign (github.com/keysvc/keysvc/backends/pkcs11): softhsmtest.go:70: SKIPPING PKCS#11 tests: SoftHSM2 missing\n" +
		"ok  \tgithub.com/keysvc/keysvc/backends/pkcs11\t0.01s\n" +
		"--- SKIP: TestLiveAWSKMS (github.com/keysvc/keysvc/backends/awskms): live_test.go:29: SKIPPING live AWS KMS test\n" +
		"    store_test.go:9: got 1, want 2\n--- FAIL: TestBroken (0.00s)\n" +
		"# github.com/keysvc/keysvc/broken\n"
	if human.String() != wantHuman {
		t.Errorf("human output:\n%q\nwant\n%q", human.String(), wantHuman)
	}
	if !rep.Failed() || rep.Packages["github.com/keysvc/keysvc/store"] != "fail" || len(rep.Other) != 1 {
		t.Errorf("failed %v, packages %v, other %q", rep.Failed(), rep.Packages, rep.Other)
	}
	skipped := rep.Skipped()
	if len(skipped) != 2 || skipped[0].Name != "TestLiveAWSKMS" || skipped[1].Name != "TestSign" {
		t.Fatalf("skipped %+v", skipped)
	}
	allow, err := ParseAllowlist(strings.NewReader("# comment\n\nbackends/awskms TestLive*  # opt-in, billable\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := Allowed(allow, "github.com/keysvc/keysvc", skipped[0]); a == nil || a.Why != "opt-in, billable" {
		t.Errorf("TestLiveAWSKMS not allowed: %+v", a)
	}
	if a := Allowed(allow, "github.com/keysvc/keysvc", skipped[1]); a != nil {
		t.Errorf("TestSign allowed by %+v", a)
	}
	for _, bad := range []string{"backends/awskms TestLive*\n", "only-one-field  # why\n", "a [ # bad pattern\n"} {
		if _, err := ParseAllowlist(strings.NewReader(bad)); err == nil {
			t.Errorf("allowlist %q accepted", bad)
		}
	}
}
