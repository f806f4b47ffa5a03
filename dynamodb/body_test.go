package dynamodb

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TestResponseWithBodyClosedEarly: a call whose response arrives while
// net/http's writer has not finished with the request's body (a writer
// that runs late on a loaded machine: here, each write returns 100 ms
// after its bytes went out) succeeds. The SDK closes the body when the
// response's headers arrive, and the writer's last copy of the body then
// failed on the SDK's reader (io.EOF from WriteTo), so the transport
// closed the connection under the SDK reading the response: "deserialization
// failed … use of closed network connection" (CI run 80, dynamodb
// TestRecordsTxnEmulated, a 64 KiB UpdateItem).
func TestResponseWithBodyClosedEarly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go serveSlowAnswers(ln)

	testDial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return lateWrites{c}, nil
	}
	defer func() { testDial = nil }()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, tr, err := newClient(ctx, "us-east-1", "http://"+ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	for i := range 3 {
		out, err := client.GetItem(ctx, &ddb.GetItemInput{
			TableName: aws.String("t"),
			Key:       map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: "x"}},
		}, func(o *ddb.Options) { o.Retryer = aws.NopRetryer{} })
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if v, ok := out.Item["pad"].(*types.AttributeValueMemberS); !ok || len(v.Value) != slowPad {
			t.Fatalf("call %d: the item came back as %v", i+1, out.Item)
		}
	}
}

// slowPad is the length of the answer's padding, so that it takes two
// writes.
const slowPad = 8192

// serveSlowAnswers answers every request on ln, once its body is read, with
// an item, the first half of the answer at once and the rest 300 ms later.
func serveSlowAnswers(ln net.Listener) {
	body := fmt.Sprintf(`{"Item":{"k":{"S":"x"},"pad":{"S":%q}}}`, strings.Repeat("p", slowPad))
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				if _, err := io.Copy(io.Discard, req.Body); err != nil {
					return
				}
				head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: %d\r\n\r\n", len(body))
				if _, err := io.WriteString(c, head+body[:len(body)/2]); err != nil {
					return
				}
				time.Sleep(300 * time.Millisecond)
				if _, err := io.WriteString(c, body[len(body)/2:]); err != nil {
					return
				}
			}
		}()
	}
}

// lateWrites is a connection whose writes return 100 ms after their bytes
// went out, as those of a writer descheduled on a loaded machine.
type lateWrites struct{ net.Conn }

func (c lateWrites) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	time.Sleep(100 * time.Millisecond)
	return n, err
}
