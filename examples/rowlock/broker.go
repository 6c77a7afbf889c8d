package main

import (
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// heartbeat is the AMQP heartbeat the relay asks for: a link that stays
// silent twice as long is taken for dead by both ends.
const heartbeat = 10 * time.Second

// broker is one AMQP connection with one confirm-mode channel and its
// returns.
type broker struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	// returns holds the messages the broker returned as unroutable. Its
	// buffer holds more than a batch: amqp091 gives up handing a return
	// over after 5s when nobody takes it, and a batch takes its returns
	// only once its confirms are in.
	returns chan amqp.Return
}

// close ends the connection, waiting at most 300ms for the broker's
// answer.
func (b *broker) close() { _ = b.conn.CloseDeadline(time.Now().Add(300 * time.Millisecond)) }

// closed reports whether the connection or the channel is closed.
func (b *broker) closed() bool { return b.conn.IsClosed() || b.ch.IsClosed() }

// takeReturns empties the returns buffer, by message id. ok is false
// when the channel was closed.
func (b *broker) takeReturns() (returned map[string]amqp.Return, ok bool) {
	returned = map[string]amqp.Return{}
	for {
		select {
		case ret, open := <-b.returns:
			if !open {
				return returned, false
			}
			returned[ret.MessageId] = ret
		default:
			return returned, true
		}
	}
}

// dialBroker opens a connection, a channel in confirm mode and its
// returns, with room for returnsCap returns. Its errors never hold the
// URL.
func dialBroker(url, id string, returnsCap int) (*broker, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{
		Dial:       amqp.DefaultDial(dialTimeout),
		Heartbeat:  heartbeat,
		Properties: amqp.Table{"connection_name": "rowlock " + id},
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to the broker: %s", urlErrorText(err))
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(300 * time.Millisecond))
		return nil, fmt.Errorf("opening a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = conn.CloseDeadline(time.Now().Add(300 * time.Millisecond))
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, returnsCap))
	return &broker{conn: conn, ch: ch, returns: returns}, nil
}

// publishBatch publishes rows, all of them before it waits for any
// confirm (the rows stay locked by the batch's transaction meanwhile),
// then waits for each confirm until its publish timeout has run out, and
// takes the returns: results[i] is rows[i]'s outcome. err is the trouble
// of the broker that left rows unconfirmed (a publish error, no confirm
// in time, a closed channel), nil when every row was confirmed or
// refused; the caller then drops the connection.
func (r *relay) publishBatch(rows []row) (results []result, err error) {
	results = make([]result, len(rows))
	for i := range results {
		results[i] = result{unconfirmed, errNotPublished}
	}
	if len(rows) == 0 {
		return results, nil
	}
	if err := r.ensureBroker(); err != nil {
		for i := range results {
			results[i].why = err
		}
		return results, err
	}
	mq := r.mq
	if _, ok := mq.takeReturns(); !ok { // stale ones are of no interest
		return results, errors.New("the channel is closed")
	}
	// amqp091 does not bound a publish's write: a broker that stops
	// reading would block it for good. The watchdog closes the
	// connection under a write that takes longer than the publish
	// timeout and a second, and under confirms that do not come.
	watchdog := time.AfterFunc(r.cfg.publishTimeout+time.Second, mq.close)
	defer watchdog.Stop()

	type sent struct {
		dc *amqp.DeferredConfirmation
		at time.Time
	}
	pending := make([]sent, len(rows))
	for i, row := range rows {
		watchdog.Reset(r.cfg.publishTimeout + time.Second)
		msg := amqp.Publishing{
			ContentType:  "application/json",
			DeliveryMode: amqp.Persistent,
			MessageId:    messageID(row.seq),
			Type:         row.topic,
			Body:         row.body,
		}
		if r.cfg.bug == bugTransient {
			msg.DeliveryMode = amqp.Transient
		}
		if row.corr != nil {
			msg.CorrelationId = *row.corr
		}
		at := time.Now()
		dc, perr := mq.ch.PublishWithDeferredConfirm(r.cfg.exchange, row.topic, true, false, msg)
		if perr == nil && dc == nil {
			perr = errors.New("the channel is not in confirm mode")
		}
		if perr != nil {
			err = fmt.Errorf("publishing seq %d: %w", row.seq, perr)
			results[i].why = err
			break
		}
		pending[i] = sent{dc, at}
	}
	watchdog.Reset(r.cfg.publishTimeout + confirmGrace + time.Second)

	late := false // a confirm did not come in time: take only those in
	for i, p := range pending {
		if p.dc == nil {
			continue // not published
		}
		acked, done := waitConfirm(p.dc, p.at.Add(r.cfg.publishTimeout), late)
		switch {
		case !done:
			late = true
			results[i] = result{unconfirmed, fmt.Errorf("no confirm within %s", r.cfg.publishTimeout)}
		case !acked && mq.closed():
			results[i] = result{unconfirmed, errors.New("the channel closed before the confirm")}
		case !acked:
			results[i] = result{refused, errors.New("nacked by the broker")}
		default:
			results[i] = result{confirmed, nil}
		}
		if results[i].outcome == unconfirmed && err == nil {
			err = results[i].why
		}
	}
	// The broker sends a return before the ack of the same message, and
	// amqp091 hands the return over before it completes the confirm: the
	// returns of every confirmed row are in the buffer now.
	returned, _ := mq.takeReturns()
	for i, row := range rows {
		if ret, ok := returned[messageID(row.seq)]; ok && results[i].outcome == confirmed {
			results[i] = result{refused, fmt.Errorf("returned by the broker: %d %s", ret.ReplyCode, ret.ReplyText)}
		}
	}
	return results, err
}

// waitConfirm waits for a publisher confirm until deadline, and a grace
// for one already on its way; with late set (an earlier confirm of the
// batch did not come in time) it takes only a confirm already in. done is
// false when none came.
func waitConfirm(dc *amqp.DeferredConfirmation, deadline time.Time, late bool) (acked, done bool) {
	select {
	case <-dc.Done():
		return dc.Acked(), true
	default:
		if late {
			return false, false
		}
	}
	for _, d := range []time.Duration{time.Until(deadline), confirmGrace} {
		t := time.NewTimer(d)
		select {
		case <-dc.Done():
			t.Stop()
			return dc.Acked(), true
		case <-t.C:
		}
	}
	return false, false
}

// ensureBroker opens a connection and a confirm-mode channel when there
// are none open, within dialTimeout and a second. It dials the node after
// the one that failed last (OUTBOX_AMQP_URL may list a cluster's nodes).
func (r *relay) ensureBroker() error {
	if r.mq != nil && !r.mq.closed() {
		return nil
	}
	r.dropBroker()
	type dialed struct {
		b   *broker
		err error
	}
	done := make(chan dialed, 1)
	node := r.node % len(r.cfg.amqpURLs)
	go func() {
		b, err := dialBroker(r.cfg.amqpURLs[node], r.cfg.relayID, r.cfg.batchSize+16)
		done <- dialed{b, err}
	}()
	limit := dialTimeout + time.Second
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case d := <-done:
		if d.err != nil {
			r.node++
			return d.err
		}
		r.mq = d.b
		r.log.printf("connected to the broker (node %d of %d)", node+1, len(r.cfg.amqpURLs))
		return nil
	case <-t.C:
		r.node++
		// The channel's handshake hung after the connection's: close
		// whatever it opens once it is done.
		go func() {
			if d := <-done; d.b != nil {
				d.b.close()
			}
		}()
		return fmt.Errorf("no broker connection within %s", limit)
	}
}

func (r *relay) dropBroker() {
	if r.mq == nil {
		return
	}
	r.mq.close()
	r.mq = nil
}
