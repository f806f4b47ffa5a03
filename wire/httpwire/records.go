package httpwire

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
)

// Versioned records: /v1/records/{key} and /v1/txn.

// Record is a record as JSON (GET /v1/records/{key} with Accept:
// application/json).
type Record struct {
	Key string `json:"key"`
	// Value is the record's value when it is valid UTF-8; otherwise it is
	// in ValueBase64.
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	Version     uint64  `json:"version"`
}

// RecordOf is the JSON of a record.
func RecordOf(v leasehold.Versioned) Record {
	r := Record{Key: v.Key, Version: v.Version}
	r.Value, r.ValueBase64 = EncodeBytes(v.Value, utf8.Valid(v.Value))
	return r
}

// Versioned is the record r describes.
func (r *Record) Versioned() (leasehold.Versioned, error) {
	b, err := DecodeBytes("value", r.Value, r.ValueBase64)
	return leasehold.Versioned{Key: r.Key, Value: b, Version: r.Version}, err
}

// ETag is the entity tag of a record version: "<version>".
func ETag(version uint64) string { return `"` + strconv.FormatUint(version, 10) + `"` }

// Version is the answer of a PUT: the version written.
type Version struct {
	Key     string `json:"key"`
	Version uint64 `json:"version"`
}

// AddBody is the body of POST /v1/records/{key}/add (Delta is required).
type AddBody struct {
	Delta *int64 `json:"delta"`
}

// Counter is the answer of an add.
type Counter struct {
	Key     string `json:"key"`
	Value   int64  `json:"value"`
	Version uint64 `json:"version"`
}

// TxnBody is the body of POST /v1/txn.
type TxnBody struct {
	If   []TxnCondition `json:"if"`
	Then []TxnWrite     `json:"then"`
}

// TxnCondition is a condition of a transaction.
type TxnCondition struct {
	Key     string `json:"key"`
	Version uint64 `json:"version"` // 0: the key must be absent
}

// TxnWrite is a write of a transaction: a value (as Value or ValueBase64),
// a delete or an add.
type TxnWrite struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	Delete      bool    `json:"delete,omitempty"`
	Add         int64   `json:"add,omitempty"`
}

// TxnBodyOf is the body of txn.
func TxnBodyOf(txn leasehold.Txn) TxnBody {
	b := TxnBody{If: make([]TxnCondition, 0, len(txn.If)), Then: make([]TxnWrite, 0, len(txn.Then))}
	for _, c := range txn.If {
		b.If = append(b.If, TxnCondition{Key: c.Key, Version: c.Version})
	}
	for _, w := range txn.Then {
		tw := TxnWrite{Key: w.Key, Delete: w.Delete, Add: w.Add}
		if w.Value != nil {
			tw.Value, tw.ValueBase64 = EncodeBytes(w.Value, PlainText(w.Value))
		}
		b.Then = append(b.Then, tw)
	}
	return b
}

// Txn is the transaction b describes. check is called on each key, in the
// body's order (conditions first), before its write's value is read; its
// error, or an *leasehold.InvalidError for a bad value, is returned. The
// transaction is not validated.
func (b *TxnBody) Txn(check func(key string) error) (leasehold.Txn, error) {
	txn := leasehold.Txn{If: make([]leasehold.Condition, 0, len(b.If)), Then: make([]leasehold.Write, 0, len(b.Then))}
	for _, c := range b.If {
		if err := check(c.Key); err != nil {
			return txn, err
		}
		txn.If = append(txn.If, leasehold.Condition{Key: c.Key, Version: c.Version})
	}
	for _, w := range b.Then {
		if err := check(w.Key); err != nil {
			return txn, err
		}
		v, err := DecodeBytes("value", w.Value, w.ValueBase64)
		if inv, ok := err.(*leasehold.InvalidError); ok {
			return txn, &leasehold.InvalidError{Field: inv.Field, Reason: fmt.Sprintf("write of %q: %s", w.Key, inv.Reason)}
		}
		txn.Then = append(txn.Then, leasehold.Write{Key: w.Key, Value: v, Delete: w.Delete, Add: w.Add})
	}
	return txn, nil
}

// TxnResult is the answer of a transaction: the version of each key
// written.
type TxnResult struct {
	Versions map[string]uint64 `json:"versions"`
}
