package httpwire

// Workflows: /v1/workflows/{definition}/{instance}.

// Entry is a transition in an instance's history.
type Entry struct {
	Version   uint64 `json:"version"`
	From      string `json:"from"`
	To        string `json:"to"`
	Actor     string `json:"actor"`
	Label     string `json:"label,omitempty"`
	RequestID string `json:"request_id"`
	At        string `json:"at"`
	Strategy  string `json:"strategy"`
	Token     uint64 `json:"token,omitempty"`
}

// Instance is a workflow instance.
type Instance struct {
	Workflow  string `json:"workflow"`
	Instance  string `json:"instance"`
	State     string `json:"state"`
	Version   uint64 `json:"version"`
	Created   string `json:"created"`
	Updated   string `json:"updated"`
	LastActor string `json:"last_actor,omitempty"`
	Last      *Entry `json:"last,omitempty"`
}

// TransitionBody is the body of POST .../transition.
type TransitionBody struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Actor     string `json:"actor"`
	Label     string `json:"label"`
	RequestID string `json:"request_id"`
}

// Result is the answer of a transition.
type Result struct {
	// Outcome is applied (this request moved the instance), repeated (this
	// request id was applied before: the original transition) or
	// already-done (ANOTHER request moved the instance into to: by says
	// who; this request applied nothing).
	Outcome  string `json:"outcome"`
	Workflow string `json:"workflow"`
	Instance string `json:"instance"`
	From     string `json:"from"`
	To       string `json:"to"`
	State    string `json:"state"`
	Version  uint64 `json:"version"`
	// By is who made the transition that explains the outcome (Entry.Actor).
	By       string `json:"by"`
	Entry    Entry  `json:"entry"`
	Strategy string `json:"strategy"`
	Attempts int    `json:"attempts"`
	Summary  string `json:"summary"`
}
