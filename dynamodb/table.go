package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/visible"
)

// Attribute names of the table layout (see docs/stores/dynamodb.md). They
// are shared with the state machines written by package sfn.
const (
	AttrKey          = "LockKey"      // S, partition key: the lease name
	AttrOwner        = "Owner"        // S: the holder (of the latest grant)
	AttrRequestID    = "RequestId"    // S: the request id of the latest grant (the store's own if the caller gave none)
	AttrToken        = "Token"        // N: the name's fencing counter, +1 per grant
	AttrData         = "Data"         // B: data of the latest grant (may be absent)
	AttrTTLMs        = "TtlMs"        // N: TTL of the latest grant or renewal, ms
	AttrExpiresAtMs  = "ExpiresAtMs"  // N: expiry, epoch ms on the writer's clock; 0 once released
	AttrHeld         = "Held"         // BOOL: false once released
	AttrAcquiredAtMs = "AcquiredAtMs" // N: time of the grant, epoch ms (display only)
	AttrExpiresAt    = "ExpiresAt"    // N: epoch seconds for DynamoDB TTL clean-up only (WithTTLCleanup)
)

// CleanupMargin is how long after a lease's expiry (or release) its item
// stays before DynamoDB's TTL clean-up may delete it, when that clean-up is
// enabled: ExpiresAt = expiry + CleanupMargin.
const CleanupMargin = 7 * 24 * time.Hour

// ErrTTLUnsupported is returned by EnableTTLCleanup when the endpoint does
// not implement UpdateTimeToLive (dynalite, for one).
var ErrTTLUnsupported = errors.New("dynamodb: this endpoint does not support Time to Live (UpdateTimeToLive)")

// CreateTable creates table for the store if it does not exist: on-demand
// capacity (PAY_PER_REQUEST), partition key LockKey of type S, nothing else
// (DynamoDB needs no other attribute declared). It waits until the table is
// ACTIVE. An existing table is checked to have that key and left as is, so
// CreateTable is idempotent. It does not enable TTL clean-up; see
// EnableTTLCleanup.
func CreateTable(ctx context.Context, client *ddb.Client, table string) error {
	if client == nil {
		return &leasehold.InvalidError{Field: "client", Reason: "must not be nil"}
	}
	if err := ValidateTable(table); err != nil {
		return err
	}
	return createTable(ctx, client, table, ttlNever, true)
}

// EnableTTLCleanup turns on DynamoDB's Time to Live on the ExpiresAt
// attribute of table, so that DynamoDB deletes an item some time after
// ExpiresAt (CleanupMargin after its lease ended). The store never relies
// on it for correctness. Deleting an item resets the name's fencing counter,
// so a later grant of that name starts again at token 1: enable it only
// for names whose fenced resources do not outlive CleanupMargin.
//
// It returns nil if TTL is already enabled on ExpiresAt, and
// ErrTTLUnsupported when the endpoint lacks UpdateTimeToLive (dynalite).
func EnableTTLCleanup(ctx context.Context, client *ddb.Client, table string) error {
	if client == nil {
		return &leasehold.InvalidError{Field: "client", Reason: "must not be nil"}
	}
	if err := ValidateTable(table); err != nil {
		return err
	}
	_, err := client.UpdateTimeToLive(ctx, &ddb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(AttrExpiresAt), Enabled: aws.Bool(true),
		},
	})
	if err == nil {
		return nil
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch code := ae.ErrorCode(); {
		case code == "UnknownOperationException":
			return ErrTTLUnsupported
		case code == "ValidationException" && strings.Contains(strings.ToLower(ae.ErrorMessage()), "already enabled"):
			return nil
		}
	}
	return translate(ctx, err)
}

// ttlMode says when createTable enables TTL clean-up.
type ttlMode int

const (
	ttlNever     ttlMode = iota
	ttlIfCreated         // Open: only on a table it created
	ttlAlways            // Init
)

// createTable creates table unless it exists and checks it (checkTable;
// replicasOK as there).
func createTable(ctx context.Context, client *ddb.Client, table string, ttl ttlMode, replicasOK bool) error {
	created := false
	err := checkTable(ctx, client, table, replicasOK)
	if errors.Is(err, ErrNoTable) {
		_, err = client.CreateTable(ctx, &ddb.CreateTableInput{
			TableName:   aws.String(table),
			BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: aws.String(AttrKey), AttributeType: types.ScalarAttributeTypeS},
			},
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(AttrKey), KeyType: types.KeyTypeHash},
			},
		})
		var inUse *types.ResourceInUseException
		if err != nil && !errors.As(err, &inUse) { // in use: a concurrent creator won
			return translate(ctx, err)
		}
		created = err == nil
		err = checkTable(ctx, client, table, replicasOK)
	}
	if err != nil {
		return err
	}
	if ttl == ttlAlways || ttl == ttlIfCreated && created {
		if err := EnableTTLCleanup(ctx, client, table); err != nil && !errors.Is(err, ErrTTLUnsupported) {
			return err
		}
	}
	return nil
}

// ErrNoTable is matched (errors.Is) by the error of Open without table
// creation (WithCreateTable(false), create=false) and of the operations
// when the table does not exist.
var ErrNoTable = errors.New("dynamodb: table does not exist")

// checkTable waits until table is ACTIVE and checks its key schema, and,
// unless replicasOK, that it is not replicated (checkReplicas). It returns
// ErrNoTable (wrapped) when the table does not exist.
func checkTable(ctx context.Context, client *ddb.Client, table string, replicasOK bool) error {
	wait := 20 * time.Millisecond
	for {
		out, err := client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(table)})
		var nf *types.ResourceNotFoundException
		if errors.As(err, &nf) {
			return fmt.Errorf("%w: %q (create it with Init, CreateTable or \"leasehold store init\")", ErrNoTable, table)
		}
		if err != nil {
			return translate(ctx, err)
		}
		t := out.Table
		if err := checkKey(table, t); err != nil {
			return err
		}
		if err := checkReplicas(table, t, replicasOK); err != nil {
			return err
		}
		switch t.TableStatus {
		case types.TableStatusActive, types.TableStatusUpdating:
			return nil
		case types.TableStatusCreating:
		default:
			return fmt.Errorf("dynamodb: table %q is %s", table, t.TableStatus)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// ErrReplicatedTable is what Open returns (wrapped, with the regions) for
// a table that is a replica of a DynamoDB global table, unless
// WithOneWriteRegion is set.
var ErrReplicatedTable = errors.New("dynamodb: the table is replicated to other regions (a global table)")

// checkReplicas refuses a table that DescribeTable shows replicated: a
// global table of the current version lists its replicas, a legacy one
// (2017.11.29) only its GlobalTableVersion. replicasOK is
// WithOneWriteRegion. A table of multi-Region strong consistency (STRONG)
// is refused whatever replicasOK: leasehold has not been run against one,
// and they do not support the transactions its records use.
func checkReplicas(table string, t *types.TableDescription, replicasOK bool) error {
	strong := t.MultiRegionConsistency == types.MultiRegionConsistencyStrong
	if !strong && (replicasOK || (len(t.Replicas) == 0 && t.GlobalTableVersion == nil)) {
		return nil
	}
	what := "global table version " + visible.String(aws.ToString(t.GlobalTableVersion))
	if len(t.Replicas) > 0 {
		what = "replicas in " + regionList(t.Replicas)
	}
	if t.MultiRegionConsistency != "" {
		what += ", consistency " + visible.String(string(t.MultiRegionConsistency))
	}
	if strong {
		return fmt.Errorf("%w: %q has %s. Tables of multi-Region strong consistency are not supported, with or without one_write_region=true: leasehold has not been run against one, and they do not support the transactions its records use. Use a table that is not replicated", ErrReplicatedTable, table, what)
	}
	return fmt.Errorf("%w: %q has %s. %s (WithOneWriteRegion), or use a table that is not replicated", ErrReplicatedTable, table, what, lastWriterWins)
}

// lastWriterWins is the reason and way out of a refusal of a global
// table of multi-Region eventual consistency (the Python client says the
// same).
const lastWriterWins = "Writes made in two regions at once are settled by last writer wins, so two processes could each be granted the same lease in their own region. Send every lease and record request for this table to one region and open it with one_write_region=true"

// maxRegionsShown bounds the regions a refusal names: a table may have
// many replicas, and an answer may claim thousands.
const maxRegionsShown = 5

// regionList names the first maxRegionsShown regions of replicas, escaped
// (a name is the service's answer, shown in a terminal), and how many
// more there are.
func regionList(replicas []types.ReplicaDescription) string {
	var names []string
	for _, r := range replicas[:min(len(replicas), maxRegionsShown)] {
		names = append(names, visible.String(aws.ToString(r.RegionName)))
	}
	list := strings.Join(names, ", ")
	if n := len(replicas) - maxRegionsShown; n > 0 {
		list += fmt.Sprintf(" and %d more", n)
	}
	return list
}

func checkKey(table string, t *types.TableDescription) error {
	ok := len(t.KeySchema) == 1 && aws.ToString(t.KeySchema[0].AttributeName) == AttrKey && t.KeySchema[0].KeyType == types.KeyTypeHash
	if ok {
		for _, a := range t.AttributeDefinitions {
			if aws.ToString(a.AttributeName) == AttrKey && a.AttributeType != types.ScalarAttributeTypeS {
				ok = false
			}
		}
	}
	if !ok {
		return fmt.Errorf("dynamodb: table %q does not have the lease layout: its key must be the partition key %s of type S, with no sort key", table, AttrKey)
	}
	return nil
}

// translate turns an SDK error into one of the store's: ctx's error when
// ctx ended, else "dynamodb: CODE: message" with no SDK type inside.
func translate(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("dynamodb: %s", err.Error()) // a timeout of the SDK's own, not the caller's
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return fmt.Errorf("dynamodb: %s: %s", ae.ErrorCode(), ae.ErrorMessage())
	}
	return fmt.Errorf("dynamodb: %s", err.Error())
}
