// consumer.go -- a consumer written with amqp091-go as its documentation
// shows: Dial, Channel, Qos, Consume with autoAck false, NotifyClose to
// notice a lost connection. It fails chosen messages a chosen number of
// times: a delivery whose attempt (x-retry-attempt, the bridge's count; 1
// when absent) is <= the message's header "fail-times" is rejected without
// requeue (Delivery.Reject(false): the broker dead-letters it to the retry
// route), any later one is acked. The first delivery (attempt 1, not
// redelivered) of a message with a header "hold-ms" is acked or rejected that
// many ms later (the crash test holds some across a broker restart, so that
// their ack is lost). The decision reads only the message, so a reconnected
// consumer, or a delivery repeated after a lost ack, decides the same way.
//
// Protocol (run_consumers.py): environment DB_URI, DB_QUEUES (comma-separated),
// DB_PREFETCH; one JSON object a line: {"event": "version" | "ready" |
// "delivery" | "disconnected", ...} as consumer_pika.py's docstring says.
// Reconnects every 0.3 s when the connection drops; runs until SIGTERM.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The Debian package ships no version constant; debian/changelog says 1.5.0.
const version = "1.5.0 (Debian golang-github-rabbitmq-amqp091-go-dev)"

var outMu sync.Mutex

func out(v map[string]interface{}) {
	b, _ := json.Marshal(v)
	outMu.Lock()
	os.Stdout.Write(append(b, '\n'))
	outMu.Unlock()
}

// asInt reads an integer header whatever AMQP type the publisher chose.
func asInt(v interface{}, dflt int64) int64 {
	switch x := v.(type) {
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case int:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return int64(x)
	case float32:
		return int64(x)
	case float64:
		return int64(x)
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			return n
		}
	case []byte:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return n
		}
	}
	return dflt
}

func handle(queue string, d amqp.Delivery) {
	recvMs := float64(time.Now().UnixNano()/1000) / 1000.0
	attempt := asInt(d.Headers["x-retry-attempt"], 1)
	failTimes := asInt(d.Headers["fail-times"], 0)
	var holdMs int64
	if attempt == 1 && !d.Redelivered {
		holdMs = asInt(d.Headers["hold-ms"], 0)
	}
	action := "ack"
	if attempt <= failTimes {
		action = "reject"
	}
	act := func() {
		if action == "reject" {
			d.Reject(false) // dead-lettered to the retry route
		} else {
			d.Ack(false)
		}
	}
	if holdMs > 0 {
		// held (still unacked) until then: a connection lost meanwhile loses the ack
		time.AfterFunc(time.Duration(holdMs)*time.Millisecond, act)
	} else {
		act()
	}
	var bid interface{}
	if s, ok := d.Headers["x-delay-bridge-id"].(string); ok {
		bid = s
	}
	var hist interface{}
	if a, ok := d.Headers["x-retry-history"].([]interface{}); ok {
		h := make([]int64, 0, len(a))
		for _, x := range a {
			h = append(h, asInt(x, -1))
		}
		hist = h
	}
	out(map[string]interface{}{"event": "delivery", "id": d.MessageId, "queue": queue,
		"attempt": attempt, "recv_ms": recvMs, "action": action, "hold_ms": holdMs, "redelivered": d.Redelivered,
		"bridge_id": bid, "history": hist})
}

// session consumes until the connection drops; returns why.
func session(uri string, queues []string, prefetch int) error {
	conn, err := amqp.Dial(uri)
	if err != nil {
		return err
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, q := range queues {
		deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func(q string, deliveries <-chan amqp.Delivery) {
			defer wg.Done()
			for d := range deliveries {
				handle(q, d)
			}
		}(q, deliveries)
	}
	out(map[string]interface{}{"event": "ready"})
	e := <-closed
	wg.Wait()
	if e == nil {
		return fmt.Errorf("connection closed")
	}
	return e
}

func main() {
	uri := os.Getenv("DB_URI")
	var queues []string
	for _, q := range strings.Split(os.Getenv("DB_QUEUES"), ",") {
		if q != "" {
			queues = append(queues, q)
		}
	}
	prefetch := 20
	if p, err := strconv.Atoi(os.Getenv("DB_PREFETCH")); err == nil {
		prefetch = p
	}
	out(map[string]interface{}{"event": "version", "client": "amqp091-go", "version": version})
	for {
		err := session(uri, queues, prefetch)
		out(map[string]interface{}{"event": "disconnected", "error": fmt.Sprint(err)})
		time.Sleep(300 * time.Millisecond)
	}
}
