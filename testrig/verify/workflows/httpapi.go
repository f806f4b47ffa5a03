package workflows

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
)

// Service is what a client drives: a *workflow.Workflows, or the workflow
// HTTP API of a `leasehold serve` (HTTPService).
type Service interface {
	Get(ctx context.Context, instance string) (workflow.Instance, error)
	Apply(ctx context.Context, r workflow.Request) (workflow.Result, error)
	Lookup(ctx context.Context, instance, requestID string) (workflow.Entry, error)
}

var _ Service = (*workflow.Workflows)(nil)

// HTTPService calls the workflow routes of a server at Base
// (http://host:port) for the definition Workflow, translating its answers
// back to the Go API's, so that the checker judges them alike.
type HTTPService struct {
	Base, Workflow string
	Client         *http.Client
}

type httpEntry struct {
	Version   uint64 `json:"version"`
	From      string `json:"from"`
	To        string `json:"to"`
	Actor     string `json:"actor"`
	RequestID string `json:"request_id"`
	At        string `json:"at"`
	Strategy  string `json:"strategy"`
	Token     uint64 `json:"token"`
}

func (e *httpEntry) entry(instance string) (workflow.Entry, error) {
	if e == nil {
		return workflow.Entry{}, nil
	}
	at, err := time.Parse(time.RFC3339Nano, e.At)
	if err != nil {
		return workflow.Entry{}, fmt.Errorf("entry time %q: %w", e.At, err)
	}
	return workflow.Entry{Instance: instance, Version: e.Version, From: e.From, To: e.To, Actor: e.Actor,
		RequestID: e.RequestID, At: at, Strategy: workflow.Strategy(e.Strategy), Token: e.Token}, nil
}

// httpAnswer is every field of a result, an instance and the problems.
type httpAnswer struct {
	Type      string     `json:"type"`
	Detail    string     `json:"detail"`
	Outcome   string     `json:"outcome"`
	State     string     `json:"state"`
	Version   uint64     `json:"version"`
	Entry     *httpEntry `json:"entry"`
	RequestID string     `json:"request_id"`
}

func (s *HTTPService) do(ctx context.Context, method, path string, body any) (int, httpAnswer, error) {
	code, a, _, err := s.doRaw(ctx, method, path, body)
	return code, a, err
}

func (s *HTTPService) doRaw(ctx context.Context, method, path string, body any) (int, httpAnswer, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.Base+"/v1/workflows/"+url.PathEscape(s.Workflow)+"/"+path, rd)
	if err != nil {
		return 0, httpAnswer{}, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, httpAnswer{}, nil, ctx.Err()
		}
		return 0, httpAnswer{}, nil, err
	}
	defer resp.Body.Close()
	var a httpAnswer
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		err = json.Unmarshal(b, &a)
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, httpAnswer{}, nil, ctx.Err()
		}
		return 0, httpAnswer{}, nil, fmt.Errorf("%s %s: %d %.200q: %w", method, path, resp.StatusCode, b, err)
	}
	return resp.StatusCode, a, b, nil
}

// Get implements Service.
func (s *HTTPService) Get(ctx context.Context, instance string) (workflow.Instance, error) {
	code, a, err := s.do(ctx, http.MethodGet, url.PathEscape(instance), nil)
	if err != nil {
		return workflow.Instance{}, err
	}
	if code != http.StatusOK {
		return workflow.Instance{}, fmt.Errorf("get: %d %s: %s", code, a.Type, a.Detail)
	}
	return workflow.Instance{Workflow: s.Workflow, ID: instance, State: a.State, Version: a.Version}, nil
}

// Apply implements Service.
func (s *HTTPService) Apply(ctx context.Context, r workflow.Request) (workflow.Result, error) {
	body := map[string]string{"from": r.From, "to": r.To, "actor": r.Actor, "request_id": r.RequestID}
	code, a, err := s.do(ctx, http.MethodPost, url.PathEscape(r.Instance)+"/transition", body)
	if err != nil {
		return workflow.Result{}, err
	}
	e, err := a.Entry.entry(r.Instance)
	if err != nil {
		return workflow.Result{}, err
	}
	res := workflow.Result{Instance: r.Instance, From: r.From, To: r.To, State: a.State, Version: a.Version, Entry: e}
	switch {
	case code == http.StatusOK:
		res.Outcome = workflow.Outcome(a.Outcome)
		return res, nil
	case code == http.StatusConflict && a.Type == "urn:leasehold:problem:wrong-state":
		res.Outcome = workflow.WrongState
		return res, nil
	case code == http.StatusConflict && a.Type == "urn:leasehold:problem:request-reused":
		return workflow.Result{}, &workflow.RequestReusedError{Workflow: s.Workflow, Instance: r.Instance,
			RequestID: r.RequestID, Actor: r.Actor, From: r.From, To: r.To, Entry: e}
	case code == http.StatusBadRequest:
		return workflow.Result{}, &leasehold.InvalidError{Field: "request", Reason: a.Detail}
	}
	return workflow.Result{}, fmt.Errorf("transition: %d %s: %s", code, a.Type, a.Detail)
}

// Lookup implements Service.
func (s *HTTPService) Lookup(ctx context.Context, instance, requestID string) (workflow.Entry, error) {
	code, a, raw, err := s.doRaw(ctx, http.MethodGet, url.PathEscape(instance)+"/requests/"+url.PathEscape(requestID), nil)
	if err != nil {
		return workflow.Entry{}, err
	}
	switch code {
	case http.StatusOK:
		var e httpEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return workflow.Entry{}, err
		}
		return e.entry(instance)
	case http.StatusNotFound:
		return workflow.Entry{}, fmt.Errorf("%s: %w", a.Detail, workflow.ErrNoRequest)
	}
	return workflow.Entry{}, fmt.Errorf("lookup: %d %s: %s", code, a.Type, a.Detail)
}
