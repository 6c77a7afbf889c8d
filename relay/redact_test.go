package relay

import (
	"errors"
	"strings"
	"testing"
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
