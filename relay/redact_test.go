package relay

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"amqp://guest:s3cret@broker:5672/", "amqp://guest:xxxxx@broker:5672/"},
		{"postgres://app:s3cret@db:5432/app?sslmode=disable", "postgres://app:xxxxx@db:5432/app?sslmode=disable"},
		{"postgres://app@db/app", "postgres://app@db/app"},
		{"postgres://db/app?password=s3cret&sslmode=disable", "postgres://db/app?password=xxxxx&sslmode=disable"},
		{"host=db user=app password=s3cret dbname=app", "host=db user=app password=xxxxx dbname=app"},
		{"host=db password='s3 cret' dbname=app", "host=db password=xxxxx dbname=app"},
		{"amqp://guest:s3cret@broker:port/", "amqp://xxxxx@broker:port/"},
		// Unparsable, with the scheme's separator first and an empty user.
		{"://guest:s3cret@broker/", "://xxxxx@broker/"},
		{"a b://@broker/", "a b://xxxxx@broker/"},
	} {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(RedactURL(tc.in), "s3cret") {
			t.Errorf("RedactURL(%q) leaks the password", tc.in)
		}
	}
}

func TestRedactError(t *testing.T) {
	url := "amqp://guest:s3cret@broker:port/"
	err := RedactError(errors.New(`parse "`+url+`": invalid port`), url)
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error leaks the password: %v", err)
	}
	clean := errors.New("connection refused")
	if got := RedactError(clean, url); got != clean {
		t.Errorf("an error without secrets should pass unchanged, got %v", got)
	}
	// The password alone in an error's text, the URL parsed.
	parsed := "amqp://guest:s3cret@broker:5672/"
	if err := RedactError(errors.New("login as guest with s3cret refused"), parsed); strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error leaks the password of a URL that parses: %v", err)
	}
	if RedactError(nil, url) != nil {
		t.Error("RedactError(nil) should be nil")
	}

	// A password that is also a word of the text blanks out only the
	// password: the names of queues and tables stay readable.
	broker := "amqp://outbox:outbox@rabbitmq-1:5672/,amqp://outbox:outbox@rabbitmq-2:5672/"
	err = RedactError(errors.New(`dialing amqp://outbox:outbox@rabbitmq-2:5672/: no queue 'outboxlab.sc_x.orders.q' in vhost '/'`), broker)
	// The user, the same word as the password, goes too.
	want := `dialing amqp://xxxxx:xxxxx@rabbitmq-2:5672/: no queue 'outboxlab.sc_x.orders.q' in vhost '/'`
	if err.Error() != want {
		t.Errorf("RedactError = %q, want %q", err, want)
	}
	named := errors.New(`Exception (404) Reason: "NOT_FOUND - no queue 'outboxlab.sc_x.orders.q.dead'"`)
	if got := RedactError(named, broker); got != named {
		t.Errorf("an error that names no secret should pass unchanged, got %v", got)
	}
	kv := "host=db user=app password=s3cret dbname=app"
	if got := RedactError(errors.New("connecting with "+kv+": refused"), kv); strings.Contains(got.Error(), "s3cret") {
		t.Errorf("error leaks the password: %v", got)
	}
}

func TestNewAMQPPublisherChecksConfig(t *testing.T) {
	if _, err := NewAMQPPublisher(AMQPConfig{URL: "http://guest:s3cret@broker/", Exchange: "events"}); err == nil {
		t.Error("accepted a non-AMQP URL")
	} else if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error leaks the password: %v", err)
	}
	if _, err := NewAMQPPublisher(AMQPConfig{URL: "amqp://broker/"}); err == nil {
		t.Error("accepted an empty exchange")
	}
	p, err := NewAMQPPublisher(AMQPConfig{URL: "amqp://broker/", Exchange: "events"})
	if err != nil {
		t.Fatalf("NewAMQPPublisher: %v", err)
	}
	if p.opts != DefaultPublishOptions() {
		t.Errorf("options = %+v, want persistent and mandatory", p.opts)
	}
}

// TestRedactURLRedactsEveryURLOfAList redacts comma-separated lists, as
// OUTBOX_AMQP_URL gives a cluster's nodes: every password goes, not the
// first one alone.
func TestRedactURLRedactsEveryURLOfAList(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"amqp://a:s3cret@h1:5672/,amqp://b:s3cond@h2:5672/,amqp://c:th1rd@h3:5672/",
			"amqp://a:xxxxx@h1:5672/,amqp://b:xxxxx@h2:5672/,amqp://c:xxxxx@h3:5672/"},
		{"amqp://a:s3cret@h1/, amqps://b:s3cond@h2/", "amqp://a:xxxxx@h1/, amqps://b:xxxxx@h2/"},
		{"amqp://h1/,amqp://b:s3cond@h2/", "amqp://h1/,amqp://b:xxxxx@h2/"},
		// A comma inside a password is no separator.
		{"postgres://u:s3c,ret@db/app", "postgres://u:xxxxx@db/app"},
		{"amqp://a:s3c,amqp@h1/,amqp://b:s3cond@h2/", "amqp://a:xxxxx@h1/,amqp://b:xxxxx@h2/"},
	} {
		got := RedactURL(tc.in)
		if got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, secret := range []string{"s3cret", "s3cond", "th1rd", "s3c,ret"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactURL(%q) leaks %s: %q", tc.in, secret, got)
			}
		}
	}
	list := "amqp://a:s3cret@h1:5672/,amqp://b:s3cond@h2:5672/"
	err := RedactError(errors.New("dialing amqp://b:s3cond@h2:5672/: refused; login as b with s3cond failed"), list)
	if strings.Contains(err.Error(), "s3cond") || !strings.Contains(err.Error(), "@h2:5672/") {
		t.Errorf("RedactError of the second URL of a list = %q", err)
	}
}

// TestBrokerUnreachableLogsNoPassword dials a list of two brokers that
// refuse: the "broker unreachable" line names them without a password.
func TestBrokerUnreachableLogsNoPassword(t *testing.T) {
	var logs bytes.Buffer
	list := "amqp://a:s3cret@127.0.0.1:1/,amqp://b:s3cond@127.0.0.1:2/"
	p, err := NewAMQPPublisher(AMQPConfig{URL: list, Exchange: "events", DialTimeout: time.Second,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Publish(ctx, Message{ID: "1", Type: "t", Payload: []byte("{}")}); err == nil {
		t.Fatal("a publish to brokers that refuse succeeded")
	}
	out := logs.String()
	if !strings.Contains(out, "broker unreachable") {
		t.Fatalf("no broker unreachable line:\n%s", out)
	}
	for _, secret := range []string{"s3cret", "s3cond"} {
		if strings.Contains(out, secret) {
			t.Errorf("the logs leak %s:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, `"url":"amqp://a:xxxxx@127.0.0.1:1/,amqp://b:xxxxx@127.0.0.1:2/"`) {
		t.Errorf("the line does not name both brokers redacted:\n%s", out)
	}
}
