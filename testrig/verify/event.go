package verify

// Event is one line a worker writes to its standard output. Operations are
// written twice, at call (E "call") and at return (E "ret", same Seq), so
// that an operation in flight when its worker was killed is still in the
// history, as indeterminate.
type Event struct {
	E      string `json:"e"`              // "call", "ret", "cs", "log"
	Worker string `json:"w"`              // worker process id ("w3")
	Seq    int64  `json:"seq,omitempty"`  // pairs call and ret within a worker
	Proc   string `json:"p,omitempty"`    // logical process (retired after an indeterminate result)
	Key    string `json:"k,omitempty"`    // lease name
	Op     string `json:"op,omitempty"`   // "acquire", "renew", "release"
	Owner  string `json:"o,omitempty"`    // owner identity
	ReqID  string `json:"rid,omitempty"`  // acquire request id
	Token  uint64 `json:"tok,omitempty"`  // token sent (renew, release) or held (cs)
	TTL    int64  `json:"ttl,omitempty"`  // nanoseconds
	T      int64  `json:"t"`              // Mono at call / return / event
	OK     bool   `json:"ok,omitempty"`   // ret: granted / renewed / released
	Out    uint64 `json:"out,omitempty"`  // ret: token granted, or the holder's
	Holder string `json:"h,omitempty"`    // ret: holder's owner when refused
	Unk    bool   `json:"unk,omitempty"`  // ret: indeterminate
	Undone bool   `json:"un,omitempty"`   // ret of an acquire: granted (Out) and undone by the store before it answered
	From   int64  `json:"from,omitempty"` // cs: grant returned
	To     int64  `json:"to,omitempty"`   // cs: release called, or local deadline if earlier
	Wrote  bool   `json:"wrote,omitempty"`
	Lost   bool   `json:"lost,omitempty"` // cs: the lease reported itself lost
	Msg    string `json:"msg,omitempty"`  // log
}
