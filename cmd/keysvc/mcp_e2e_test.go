package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/keysvctest"
	"github.com/keysvc/keysvc/mcpnode"
)

var (
	nodeBinOnce sync.Once
	nodeBinPath string
	nodeBinErr  error
)

// nodeBinary builds ./examples/vrp-node once per test run.
func nodeBinary(t testing.TB) string {
	t.Helper()
	keysvcBinary(t) // creates binDir
	nodeBinOnce.Do(func() {
		nodeBinPath = filepath.Join(binDir, "vrp-node")
		args := []string{"build", "-o", nodeBinPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		if out, err := exec.Command("go", append(args, "../../examples/vrp-node")...).CombinedOutput(); err != nil {
			nodeBinErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if nodeBinErr != nil {
		t.Fatalf("go build ./examples/vrp-node: %v", nodeBinErr)
	}
	return nodeBinPath
}

// startNode runs the example node against keysvc at keysvcURL and returns
// its MCP URL. It stops at test end.
func startNode(t *testing.T, keysvcURL, token string) string {
	t.Helper()
	cmd := exec.Command(nodeBinary(t), "--listen", "127.0.0.1:0", "--keysvc", keysvcURL, "--key", "dev")
	cmd.Env = append(os.Environ(), "KEYSVC_TOKEN="+token)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("vrp-node did not stop on SIGINT")
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		// "vrp-node listening on http://127.0.0.1:PORT/mcp (...)"
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasPrefix(f[3], "http://127.0.0.1:") {
			t.Fatalf("vrp-node said %q", l)
		}
		return f[3]
	case err := <-done:
		t.Fatalf("vrp-node exited: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("vrp-node did not start:\n%s", stderr.String())
	}
	return ""
}

// TestMCPInterop runs what a new user runs — `keysvc serve --dev`, then
// the example node next to it — and drives both with real MCP clients:
// the go-sdk client here, the TypeScript SDK through interop/mcp-ts. Every
// attestation the node returns verifies through keysvc's /mcp
// verify_vrp_receipt and through `keysvc verify`; tampered ones are
// invalid in both.
func TestMCPInterop(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, nil, "--dev", "--data-dir", dir)
	tok, err := os.ReadFile(filepath.Join(dir, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	nodeURL := startNode(t, srv.URL, strings.TrimSpace(string(tok)))
	history := srv.URL + "/.well-known/vrp-key-history.json"
	ctx := context.Background()

	connect := func(url string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatalf("connect %s: %v", url, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	agent := connect(nodeURL)
	verifier := connect(srv.URL + "/mcp")

	// verifyBoth checks a receipt through /mcp and `keysvc verify`, and
	// returns both verdicts.
	verifyBoth := func(name string, receipt map[string]any) (string, string) {
		t.Helper()
		res, err := verifier.CallTool(ctx, &mcp.CallToolParams{Name: "verify_vrp_receipt", Arguments: map[string]any{"receipt": receipt}})
		if err != nil || res.IsError {
			t.Fatalf("%s: /mcp: %v %+v", name, err, res)
		}
		var v struct {
			Attestations []struct {
				Status string
				Error  *string
			}
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		var mcpVerdict []string
		for _, a := range v.Attestations {
			s := a.Status
			if a.Error != nil {
				s += ":" + *a.Error
			}
			mcpVerdict = append(mcpVerdict, s)
		}
		file := writeJSON(t, dir, name+".json", receipt)
		out, errOut, code := runCLI(t, nil, "verify", file, "--history", history)
		return strings.Join(mcpVerdict, " "), fmt.Sprintf("exit %d: %s%s", code, out, errOut)
	}

	for i, args := range []string{
		`{"checkIn":"2026-09-02","checkOut":"2026-09-05","guests":2}`,
		`{"check_in":"2026-12-27","check_out":"2026-12-30","guests":4}`,
		`{"checkIn":"2027-01-10","checkOut":"2027-01-11","guests":1}`,
	} {
		res, err := agent.CallTool(ctx, &mcp.CallToolParams{Name: "get_verified_stay_offer", Arguments: json.RawMessage(args)})
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %+v", i, err, res)
		}
		var out struct {
			Offer            struct{ Property string }
			OfferAttestation client.Attestation `json:"offer_attestation"`
		}
		b, _ := json.Marshal(res.StructuredContent)
		mb, _ := json.Marshal(res.Meta[mcpnode.MetaKey])
		var tr mcpnode.Transport
		if json.Unmarshal(b, &out) != nil || json.Unmarshal(mb, &tr) != nil || tr.Status != mcpnode.StatusSigned {
			t.Fatalf("call %d: %s %s", i, b, mb)
		}
		if i == 0 && tr.ArgumentsSHA256 != "2e5b4dc2f91bec3a762993c25676b05d083bd2fabfcb52a403a651dcec7ca050" {
			t.Fatalf("camelCase arguments hashed to %s", tr.ArgumentsSHA256)
		}
		receipt := map[string]any{"vrp_receipt_version": "1.0", "subject": map[string]any{"property": out.Offer.Property},
			"issuer": map[string]any{"node": out.Offer.Property}, "attestations": []any{out.OfferAttestation, tr.Attestation}}
		m, cli := verifyBoth(fmt.Sprintf("receipt-%d", i), receipt)
		if m != "verified verified" || !strings.HasPrefix(cli, "exit 0: ") || !strings.Contains(cli, "fully verified: 2 of 2") {
			t.Fatalf("call %d: /mcp %s; keysvc verify %s", i, m, cli)
		}
		bad := *tr.Attestation
		bad.Signature = tamper(bad.Signature)
		receipt["attestations"] = []any{out.OfferAttestation, bad}
		m, cli = verifyBoth(fmt.Sprintf("tampered-%d", i), receipt)
		if m != "verified invalid:sig_invalid" || !strings.HasPrefix(cli, "exit 2: ") || !strings.Contains(cli, "sig_invalid") {
			t.Fatalf("tampered %d: /mcp %s; keysvc verify %s", i, m, cli)
		}
	}

	// The TypeScript SDK, from npm (installed by .ci/run: npm ci in
	// interop/mcp-ts).
	ts := filepath.Join("..", "..", "interop", "mcp-ts")
	nodeJS, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(ts, "node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	}
	keysvctest.RequireReal(t, "Node.js with interop/mcp-ts installed (npm ci --prefix interop/mcp-ts)", err)
	receiptFile := filepath.Join(dir, "ts-receipt.json")
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(tctx, nodeJS, filepath.Join(ts, "check.mjs"), "--node", nodeURL, "--keysvc", srv.URL+"/mcp", "--receipt-out", receiptFile)
	out, err := cmd.CombinedOutput()
	t.Logf("TypeScript SDK:\n%s", out)
	if err != nil || !strings.Contains(string(out), " passed, 0 failed") {
		t.Fatalf("interop/mcp-ts/check.mjs: %v", err)
	}
	// The receipt the TypeScript client assembled verifies with keysvc verify.
	if o, e, code := runCLI(t, nil, "verify", receiptFile, "--history", history); code != 0 {
		t.Fatalf("keysvc verify of the TypeScript client's receipt: exit %d\n%s%s", code, o, e)
	}
}

// tamper changes one base64url character of a JWS signature segment.
func tamper(jws string) string {
	b := []byte(jws)
	i := strings.LastIndexByte(jws, '.') + 3
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}
