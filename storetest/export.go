package storetest

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// LeaseOp is one recorded store operation on one lease name, for checking
// histories recorded outside this package (the fault suites record them in
// worker processes) against LeaseModel. Times are nanoseconds on one
// monotonic clock shared by every recorder.
type LeaseOp struct {
	Client    int           // porcupine client id (one per logical process)
	Kind      string        // "acquire", "renew", "release", "lose", "wait", "undone" or "unheard" (see LeaseModel)
	Owner     string        // the caller's owner identity
	RequestID string        // acquire: its request id
	Token     uint64        // renew, release: the token sent
	TTL       time.Duration // acquire, renew
	Call      int64
	Return    int64 // ignored when Unknown
	OK        bool  // granted / renewed / released
	OutToken  uint64
	Holder    string // acquire refused: the holder's owner (OutToken 0: the head waiter's)
	Unknown   bool   // indeterminate: may or may not have taken effect
}

// Never is the return time given to indeterminate operations: they may take
// effect at any moment after their call.
const Never = int64(1) << 62

// Operation converts op to the form LeaseModel checks. It returns an error
// for an unknown Kind.
func (op LeaseOp) Operation() (porcupine.Operation, error) {
	in := opInput{Owner: op.Owner, RequestID: op.RequestID, Token: op.Token, TTL: int64(op.TTL), Call: op.Call}
	switch op.Kind {
	case "acquire":
		in.Kind = opAcquire
	case "renew":
		in.Kind = opRenew
	case "release":
		in.Kind = opRelease
	case "lose":
		in.Kind = opLose
	case "wait":
		in.Kind = opWait
	case "undone":
		in.Kind = opUndone
	case "unheard":
		// An acquire the store ends if its answer is lost; answered, it
		// is an acquire like any other.
		in.Kind = opAcquire
		if op.Unknown {
			in.Kind = opUnheard
		}
	default:
		return porcupine.Operation{}, fmt.Errorf("storetest: unknown lease operation %q", op.Kind)
	}
	out := opOutput{OK: op.OK, Token: op.OutToken, HolderOwner: op.Holder, Unknown: op.Unknown, Return: op.Return}
	if op.Unknown {
		out.Return = Never
	}
	return porcupine.Operation{ClientId: op.Client, Input: in, Call: op.Call, Output: out, Return: out.Return}, nil
}

// MarkQueued completes ops (as returned by LeaseOp.Operation, the whole
// history of one name) before they are checked: it tells LeaseModel which
// refusals naming the head of a queue (OutToken 0) overlapped a wait of
// the owner they name.
func MarkQueued(ops []porcupine.Operation) { markQueued(ops) }

// DescribeHistory renders ops (as returned by LeaseOp.Operation) for a
// failure message.
func DescribeHistory(name string, ops []porcupine.Operation) string { return describe(name, ops) }
