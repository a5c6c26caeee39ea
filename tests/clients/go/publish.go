// publish.go -- amqp091-go as its documentation shows: Dial, Channel,
// Confirm(false), NotifyPublish, PublishWithContext, then one confirmation
// per publish. Header values are Go values in an amqp.Table: int and int32
// go out as 'I' (an int through a uint32 cast), int64 as 'l', float64 as
// 'd', time.Time as a timestamp in seconds. Protocol: see run_client.py.
//
// DB_MODE=x-delayed-message: an application written for the delayed-message
// plugin, unchanged (run_client.py shim): ExchangeDeclare of kind
// x-delayed-message with args x-delayed-type, QueueDeclare, QueueBind, publish
// with header x-delay (not mandatory: the plugin returned every delayed
// mandatory message).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The Debian package ships no version constant; debian/changelog says 1.5.0.
const version = "1.5.0 (Debian golang-github-rabbitmq-amqp091-go-dev)"

type c struct {
	id      string
	headers amqp.Table
	expect  string
}

func nowMs() int64 { return time.Now().UnixNano() / int64(time.Millisecond) }

func main() {
	fmt.Println("VERSION " + version)
	conn, err := amqp.Dial(os.Getenv("DB_URI"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := ch.Confirm(false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if os.Getenv("DB_MODE") == "x-delayed-message" {
		delayedExchanges(ch)
		return
	}
	now := nowMs()
	dueS := now/1000 + 3
	cases := []c{
		{"int", amqp.Table{"x-delay": 1500}, "delay:1500"},                  // 'I'
		{"int64", amqp.Table{"x-delay": int64(1500)}, "delay:1500"},         // 'l'
		{"float64", amqp.Table{"x-delay": 1500.7}, "delay:1500"},            // 'd'
		{"string", amqp.Table{"x-delay": "1500"}, "delay:1500"},
		// above 2^31-1 ms an int wraps negative through the uint32 cast: at once, as
		// the plugin does (README: pass an int64 for delays of 24.8 days and more)
		{"int-wrapped", amqp.Table{"x-delay": 3000000000}, "now"},
		{"int64-long", amqp.Table{"x-delay": int64(3000000000)}, "dlx:x-delay above max_delay_ms"},
		{"until-time", amqp.Table{"x-delay-until": time.Unix(dueS, 0)}, fmt.Sprintf("due:%d", dueS*1000)}, // 'T'
		{"until-rfc3339", amqp.Table{"x-delay-until": time.UnixMilli(now + 2500).UTC().Format("2006-01-02T15:04:05.000Z07:00")},
			fmt.Sprintf("due:%d", now+2500)},
		{"until-ms", amqp.Table{"x-delay-until": now + 2000}, fmt.Sprintf("due:%d", now+2000)}, // 'l'
		{"bad", amqp.Table{"x-delay": "soon"}, "dlx:invalid x-delay"},
	}
	// the documented confirm pattern: NotifyPublish, publish, then one
	// confirmation per publish, in order
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, len(cases)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lines []string
	for _, k := range cases {
		k.headers["x-client"] = "amqp091-go"
		t := nowMs()
		err := ch.PublishWithContext(ctx, os.Getenv("DB_EXCHANGE"), os.Getenv("DB_RK"), true, false,
			amqp.Publishing{MessageId: k.id, Headers: k.headers, Body: []byte(k.id)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		lines = append(lines, fmt.Sprintf("SENT %s %d %s", k.id, t, k.expect))
	}
	confirmAll(confirms, len(cases))
	for _, l := range lines {
		fmt.Println(l)
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// delayedExchanges: DB_MODE=x-delayed-message (see the top of the file).
func delayedExchanges(ch *amqp.Channel) {
	// run_client.SHIM_TYPES: type, routing key, binding of .q, of .decoy (a Table: headers)
	types := [][4]interface{}{
		{"direct", "rk", "rk", "other"}, {"topic", "order.eu", "*.eu", "*.us"},
		{"fanout", "rk", "", nil}, {"headers", "rk", amqp.Table{"kind": "a"}, amqp.Table{"kind": "b"}},
	}
	cases := []struct { // case, x-delay, the plugin_compat check it is: kind and value
		id     string
		delay  interface{}
		expect string
	}{
		{"int", 1500, "int32:1500"},          // 'I'
		{"int64", int64(1500), "int64:1500"}, // 'l'
		{"float64", 1500.7, "float64:1500"},  // 'd'
		{"string", "1500", "string:1500"},
		{"zero", 0, "zero:0"},
		{"negative", -1000, "negative-int32:0"}, // 'I'
		{"none", nil, "missing:0"},
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, len(types)*len(cases)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lines []string
	for _, ty := range types {
		kind, key := ty[0].(string), ty[1].(string)
		x := os.Getenv("DB_EXCHANGE") + "." + kind
		must(ch.ExchangeDeclare(x, "x-delayed-message", true, false, false, false,
			amqp.Table{"x-delayed-type": kind}))
		for i, suffix := range []string{".q", ".decoy"} {
			b := ty[2+i]
			if b == nil {
				continue
			}
			_, err := ch.QueueDeclare(x+suffix, true, false, false, false, nil)
			must(err)
			if args, ok := b.(amqp.Table); ok {
				bargs := amqp.Table{"x-match": "all"}
				for k, v := range args {
					bargs[k] = v
				}
				must(ch.QueueBind(x+suffix, "", x, false, bargs))
			} else {
				must(ch.QueueBind(x+suffix, b.(string), x, false, nil))
			}
		}
		for _, k := range cases {
			headers := amqp.Table{"x-client": "amqp091-go", "kind": "a"}
			if k.delay != nil {
				headers["x-delay"] = k.delay
			}
			mid := kind + "/" + k.id
			t := nowMs()
			must(ch.PublishWithContext(ctx, x, key, false, false,
				amqp.Publishing{MessageId: mid, Headers: headers, Body: []byte(mid)}))
			lines = append(lines, fmt.Sprintf("SENT %s %d %s", mid, t, k.expect))
		}
	}
	confirmAll(confirms, len(lines))
	for _, l := range lines {
		fmt.Println(l)
	}
}

// confirmAll waits for n publisher confirms: every one an ack, each within 30 s.
func confirmAll(confirms <-chan amqp.Confirmation, n int) {
	for i := 0; i < n; i++ {
		select {
		case c := <-confirms:
			if !c.Ack {
				fmt.Fprintf(os.Stderr, "nacked: delivery tag %d\n", c.DeliveryTag)
				os.Exit(1)
			}
		case <-time.After(30 * time.Second):
			fmt.Fprintln(os.Stderr, "no confirmation within 30 s")
			os.Exit(1)
		}
	}
}
