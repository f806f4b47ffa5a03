package storetest

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const ms = int64(time.Millisecond)

func op(client int, in opInput, out opOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: in.Call, Output: out, Return: out.Return}
}

func acq(owner, reqID string, ttl, call int64) opInput {
	return opInput{Kind: opAcquire, Owner: owner, RequestID: reqID, TTL: ttl, Call: call}
}

// TestModelVerdicts checks the model on hand-written histories whose
// verdict is known, so that a model that accepts everything cannot pass.
func TestModelVerdicts(t *testing.T) {
	ttl := 100 * ms
	cases := []struct {
		name  string
		legal bool
		ops   []porcupine.Operation
	}{
		{"grant, then held", true, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
			op(1, acq("b", "r2", ttl, 10*ms), opOutput{HolderOwner: "a", Token: 1, Return: 11 * ms}),
		}},
		{"two grants while alive", false, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
			op(1, acq("b", "r2", ttl, 10*ms), opOutput{OK: true, Token: 2, Return: 11 * ms}),
		}},
		{"takeover after expiry", true, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
			op(1, acq("b", "r2", ttl, 120*ms), opOutput{OK: true, Token: 2, Return: 121 * ms}),
		}},
		{"held long after expiry", false, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
			op(1, acq("b", "r2", ttl, 300*ms), opOutput{HolderOwner: "a", Token: 1, Return: 301 * ms}),
		}},
		{"token reused", false, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
			op(0, opInput{Kind: opRelease, Owner: "a", Token: 1, Call: 2 * ms}, opOutput{OK: true, Return: 3 * ms}),
			op(1, acq("b", "r2", ttl, 4*ms), opOutput{OK: true, Token: 1, Return: 5 * ms}),
		}},
		{"release by another owner", false, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
			op(1, opInput{Kind: opRelease, Owner: "b", Token: 1, Call: 2 * ms}, opOutput{OK: true, Return: 3 * ms}),
		}},
		{"retried acquire gets its grant back", true, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
			op(0, acq("a", "r1", ttl, 2*ms), opOutput{OK: true, Token: 1, Return: 3 * ms}),
		}},
		{"renew after takeover", false, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 1 * ms}),
			op(1, acq("b", "r2", ttl, 120*ms), opOutput{OK: true, Token: 2, Return: 121 * ms}),
			op(0, opInput{Kind: opRenew, Owner: "a", Token: 1, TTL: ttl, Call: 130 * ms}, opOutput{OK: true, Return: 131 * ms}),
		}},
		{"concurrent grant and held: either order", true, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{OK: true, Token: 1, Return: 10 * ms}),
			op(1, acq("b", "r2", ttl, 1*ms), opOutput{HolderOwner: "a", Token: 1, Return: 9 * ms}),
		}},
		{"indeterminate acquire may have taken effect", true, []porcupine.Operation{
			op(0, acq("a", "r1", ttl, 0), opOutput{Unknown: true, Return: 1 << 62}),
			op(1, acq("b", "r2", ttl, 10*ms), opOutput{HolderOwner: "a", Token: 1, Return: 11 * ms}),
		}},
	}
	for _, c := range cases {
		got := porcupine.CheckOperations(LeaseModel(), c.ops)
		if got != c.legal {
			t.Errorf("%s: checker says legal=%v, want %v", c.name, got, c.legal)
		}
	}
}
