// publish.go -- amqp091-go as its documentation shows: Dial, Channel,
// Confirm(false), NotifyPublish, PublishWithContext, then one confirmation
// per publish. Header values are Go values in an amqp.Table: int and int32
// go out as 'I' (an int through a uint32 cast), int64 as 'l', float64 as
// 'd', time.Time as a timestamp in seconds. Protocol: see run_client.py.
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
	for range cases {
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
	for _, l := range lines {
		fmt.Println(l)
	}
}
