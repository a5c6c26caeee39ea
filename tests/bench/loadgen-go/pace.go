// pace.go -- a second load generator for tests/bench/ontime.sh, written
// apart from the project's own (load_publish.c, load_consume.c: C,
// rabbitmq-c), with another client library (amqp091-go, Debian's
// golang-github-rabbitmq-amqp091-go-dev 1.5.0), so that a figure both agree
// on is not an artefact of one tool (issue 41). Two roles, one binary, two
// processes (the harness starts the consumer in the background and waits
// for its ready file, then runs the publisher in the foreground):
//
//	pace publish --uri URI --count N [--mode plain|xdelay|deliverytime] [--exchange X]
//	             [--routing-key K] [--delay LO[-HI]] [--rate R] [--size B]
//	             [--window W] [--tag T] [--seed S]
//	pace consume --uri URI --count N [--queue Q] [--exchange X
//	             [--exchange-type T [--delayed-type D]]] [--routing-key K]
//	             [--purge] [--tag T] [--ready-file F] [--idle S] [--first-wait S]
//	             [--queue-type T]
//
// Flags take one dash or two (Go's flag package), so the harness's command
// lines for load_publish / load_consume serve unchanged; options of theirs
// this tool has no use for (--stamp) are refused rather than ignored.
//
// Pacing, the way an application with a timer would do it: a time.Ticker of
// 1 ms; at each tick the publisher sends every message whose slot
// (start + i/R s) has come -- two a tick at 2,000 msg/s, eleven at 11,000.
// Open loop: it never waits for a confirm unless W (default 1000) publishes
// are unconfirmed. behind_max_ms is the largest (send time - slot) over the
// messages, so it is at least up to one tick by construction (a slot falls
// between ticks), plus however late the Go runtime wakes the ticker.
// load_publish instead sleeps to each slot to the microsecond (ppoll) and
// sends one message at a time. Without --rate (or --rate 0): as fast as the
// window allows (saturation).
//
// Confirms: a goroutine reads NotifyPublish (the library hands one
// Confirmation per delivery tag, in order, multiple acks split) and frees
// one window slot per confirmation; the publisher takes a slot before each
// publish. rate = N / (first publish to last confirm).
//
// The stamp is the body's first bytes, ASCII, then '.' filler to --size
// (default 256; a body is never shorter than its stamp):
//
//	pace1 run=<tag> seq=<i> sent_us=<epoch us> delay_ms=<d>;
//
// sent_us is time.Now() just before the publish; d is 0 in plain mode and
// in xdelay mode uniform in [LO, HI] ms (math/rand, seeded by --seed), sent
// as header x-delay (int64); in deliverytime mode the same d goes as header
// x-opt-delivery-time = sent_us + d ms in epoch ms, rounded up (int64: a
// quorum queue's own delay, rabbitmq-server's qq-vNext). Messages are
// persistent (delivery mode 2).
//
// The consumer declares what load_consume declares for the bench topology
// when --exchange is given: exchange X durable, direct (or of type T, with
// argument x-delayed-type D when given: the plugin's exchange), queue Q
// durable (argument x-queue-type T with --queue-type T), Q bound to X with K; --purge empties Q; then basic.consume
// with automatic acks, the ready file touched once consume-ok came back.
// Lateness of a message = receive time - (sent_us + d * 1000), in ms with
// the microseconds kept; it stops at N distinct messages of its --tag, or
// after --idle s (default 30) without one once one came, --first-wait s
// (default 600) before. Percentiles are exact: all samples sorted, the
// value at index ceil(p/100 * n) - 1.
//
// Output: one key=value line each, with every key the harness reads from
// load_publish / load_consume (tests/bench/harness.sh, p and c):
//
//	pace_publish gen=amqp091-go-1.5.0 mode=.. count=.. bytes=.. size=fixed
//	  window=.. seconds=.. rate=.. mb_per_s=.. acked=.. nacked=.. end_ms=..
//	  target_rate=.. behind_max_ms=.. behind_max_seq=.. ticks=..
//	(behind_max_seq: the message that was furthest behind; ticks: how many
//	the publisher received -- Go's ticker drops those it was too late for)
//	pace_consume gen=amqp091-go-1.5.0 queue=.. expected=.. received=..
//	  unique=.. dup=.. foreign=.. early=.. seconds=.. rate=..
//	  first_recv_ms=.. last_recv_ms=.. min_due_ms=.. max_due_ms=..
//	  lat_min_ms=.. lat_p50_ms=.. lat_p90_ms=.. lat_p99_ms=.. lat_p999_ms=..
//	  lat_max_ms=.. lat_mean_ms=..
//
// Exit 0 when all were confirmed (publish) or all arrived (consume), 1 when
// some did not arrive, 2 on an error. Build (GOPATH style, as
// tests/clients/run_client.py builds its Go client):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=DIR go build -o pace pace.go
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The Debian package ships no version constant; debian/changelog says 1.5.0.
const gen = "amqp091-go-1.5.0"

func die(role, format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "pace %s: %s\n", role, fmt.Sprintf(format, a...))
	os.Exit(2)
}

func epochUs(t time.Time) int64 { return t.UnixNano() / 1000 }

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "publish" && os.Args[1] != "consume") {
		fmt.Fprintln(os.Stderr, "usage: pace publish|consume --uri URI --count N [options] (see the head of pace.go)")
		os.Exit(2)
	}
	if os.Args[1] == "publish" {
		publish(os.Args[2:])
	} else {
		consume(os.Args[2:])
	}
}

// ---------------------------------------------------------------- publisher

func parseDelay(s string) (lo, hi int64, err error) {
	a, b, found := strings.Cut(s, "-")
	if lo, err = strconv.ParseInt(a, 10, 64); err != nil {
		return
	}
	hi = lo
	if found {
		if hi, err = strconv.ParseInt(b, 10, 64); err != nil {
			return
		}
	}
	if lo < 0 || hi < lo {
		err = fmt.Errorf("%q: expected LO[-HI], 0 <= LO <= HI", s)
	}
	return
}

// parseFlags parses a role's options; a stray argument is a usage error.
func parseFlags(fs *flag.FlagSet, args []string, role string) {
	fs.Parse(args)
	if fs.NArg() > 0 {
		die(role, "unexpected argument %q", fs.Arg(0))
	}
}

func publish(args []string) {
	fs := flag.NewFlagSet("pace publish", flag.ExitOnError)
	uri := fs.String("uri", "amqp://guest:guest@127.0.0.1:5672/%2f", "broker URI")
	count := fs.Int("count", 0, "messages to publish")
	mode := fs.String("mode", "plain", "plain, xdelay or deliverytime")
	exchange := fs.String("exchange", "bench.target", "exchange to publish to")
	key := fs.String("routing-key", "bench", "routing key")
	delay := fs.String("delay", "0", "xdelay: delay LO[-HI] ms, uniform")
	rate := fs.Int("rate", 0, "msg/s, open loop on a 1 ms ticker; 0 = as fast as the window allows")
	size := fs.Int("size", 256, "body bytes (at least the stamp)")
	window := fs.Int("window", 1000, "unconfirmed publishes at most")
	tag := fs.Int("tag", 1, "run tag, matched by the consumer")
	seed := fs.Int64("seed", 1, "seed of the delays")
	parseFlags(fs, args, "publish")
	if *count < 1 || *window < 1 || *rate < 0 || *size < 0 {
		die("publish", "--count and --window must be >= 1, --rate and --size >= 0")
	}
	if *mode != "plain" && *mode != "xdelay" && *mode != "deliverytime" {
		die("publish", "--mode %s: plain, xdelay or deliverytime", *mode)
	}
	lo, hi, err := parseDelay(*delay)
	if err != nil {
		die("publish", "--delay %v", err)
	}
	if *mode == "plain" {
		lo, hi = 0, 0
	}

	conn, err := amqp.Dial(*uri)
	if err != nil {
		die("publish", "connect: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		die("publish", "channel: %v", err)
	}
	if err := ch.Confirm(false); err != nil {
		die("publish", "confirm.select: %v", err)
	}
	// Buffered to the window: the library's reader never blocks on it.
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, *window+1))
	slots := make(chan struct{}, *window) // one token per unconfirmed publish
	var acked, nacked int
	done := make(chan time.Time)
	go func() {
		for n := 0; n < *count; n++ {
			c, ok := <-confirms
			if !ok {
				fmt.Fprintf(os.Stderr, "pace publish: channel closed after %d confirms\n", n)
				os.Exit(2)
			}
			if c.Ack {
				acked++
			} else {
				nacked++
			}
			<-slots
		}
		done <- time.Now()
	}()

	rng := rand.New(rand.NewSource(*seed))
	filler := []byte(strings.Repeat(".", *size))
	var bytes int64
	var behindMax time.Duration
	behindSeq := 0
	ticks := 0
	send := func(i int) {
		slots <- struct{}{} // blocks only when the window is full
		d := int64(0)
		if hi > lo {
			d = lo + rng.Int63n(hi-lo+1)
		} else {
			d = lo
		}
		now := time.Now()
		stamp := fmt.Sprintf("pace1 run=%d seq=%d sent_us=%d delay_ms=%d;", *tag, i, epochUs(now), d)
		body := []byte(stamp)
		if len(body) < *size {
			body = append(body, filler[:*size-len(body)]...)
		}
		msg := amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", Body: body}
		switch *mode {
		case "xdelay":
			msg.Headers = amqp.Table{"x-delay": d}
		case "deliverytime":
			// A quorum queue's own delay: the send time + d in epoch ms,
			// rounded up, so never before what the stamp counts from.
			msg.Headers = amqp.Table{"x-opt-delivery-time": (epochUs(now) + d*1000 + 999) / 1000}
		}
		if err := ch.Publish(*exchange, *key, false, false, msg); err != nil {
			die("publish", "basic.publish %d: %v", i, err)
		}
		bytes += int64(len(body))
	}

	start := time.Now()
	if *rate == 0 {
		for i := 0; i < *count; i++ {
			send(i)
		}
	} else {
		tick := time.NewTicker(time.Millisecond)
		next := 0
		for next < *count {
			<-tick.C
			ticks++
			for next < *count {
				slot := start.Add(time.Duration(int64(next) * int64(time.Second) / int64(*rate)))
				t := time.Now()
				if t.Before(slot) {
					break
				}
				if late := t.Sub(slot); late > behindMax {
					behindMax, behindSeq = late, next
				}
				send(next)
				next++
			}
		}
		tick.Stop()
	}
	var end time.Time
	select {
	case end = <-done:
	case <-time.After(60 * time.Second):
		die("publish", "no confirm within 60 s of the last publish")
	}
	secs := end.Sub(start).Seconds()
	fmt.Printf("pace_publish gen=%s mode=%s count=%d bytes=%d size=fixed window=%d seconds=%.3f "+
		"rate=%.0f mb_per_s=%.1f acked=%d nacked=%d end_ms=%d target_rate=%d behind_max_ms=%.1f behind_max_seq=%d ticks=%d\n",
		gen, *mode, *count, bytes, *window, secs, float64(*count)/secs, float64(bytes)/secs/1e6,
		acked, nacked, epochUs(time.Now())/1000, *rate, float64(behindMax.Microseconds())/1000, behindSeq, ticks)
	conn.Close()
}

// ---------------------------------------------------------------- consumer

// pct: the p-th percentile of sorted s, the nearest rank.
func pct(s []float64, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return s[i]
}

func consume(args []string) {
	fs := flag.NewFlagSet("pace consume", flag.ExitOnError)
	uri := fs.String("uri", "amqp://guest:guest@127.0.0.1:5672/%2f", "broker URI")
	count := fs.Int("count", 0, "distinct messages to wait for")
	queue := fs.String("queue", "bench.out", "queue to consume")
	exchange := fs.String("exchange", "", "declare this exchange (durable) and bind the queue to it")
	exType := fs.String("exchange-type", "direct", "type of --exchange")
	delayedType := fs.String("delayed-type", "", "argument x-delayed-type of --exchange (the plugin's)")
	key := fs.String("routing-key", "bench", "binding key")
	purge := fs.Bool("purge", false, "purge the queue before consuming")
	tag := fs.Int("tag", 1, "run tag of the publisher")
	ready := fs.String("ready-file", "", "touched once consume-ok came")
	idle := fs.Int("idle", 30, "stop after S s without a message, once one came")
	firstWait := fs.Int("first-wait", 600, "stop after S s without the first message")
	manualAck := fs.Int("manual-ack", 0, "manual acks: one multiple ack per N messages (0: automatic acks)")
	prefetch := fs.Int("prefetch", 1000, "basic.qos prefetch with --manual-ack")
	ackEvery := fs.Int("ack-every-ms", 0, "with --manual-ack: also one multiple ack once T ms passed since the last")
	queueType := fs.String("queue-type", "", "argument x-queue-type of the queue declared with --exchange")
	parseFlags(fs, args, "consume")
	if *count < 1 {
		die("consume", "--count N (N >= 1) is required")
	}

	conn, err := amqp.Dial(*uri)
	if err != nil {
		die("consume", "connect: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		die("consume", "channel: %v", err)
	}
	if *exchange != "" {
		var xargs amqp.Table
		if *delayedType != "" {
			xargs = amqp.Table{"x-delayed-type": *delayedType}
		}
		if err := ch.ExchangeDeclare(*exchange, *exType, true, false, false, false, xargs); err != nil {
			die("consume", "exchange.declare: %v", err)
		}
		var qargs amqp.Table
		if *queueType != "" {
			qargs = amqp.Table{"x-queue-type": *queueType}
		}
		if _, err := ch.QueueDeclare(*queue, true, false, false, false, qargs); err != nil {
			die("consume", "queue.declare: %v", err)
		}
		if err := ch.QueueBind(*queue, *key, *exchange, false, nil); err != nil {
			die("consume", "queue.bind: %v", err)
		}
	}
	if *purge {
		if _, err := ch.QueuePurge(*queue, false); err != nil {
			die("consume", "queue.purge: %v", err)
		}
	}
	if *ackEvery > 0 && *manualAck == 0 {
		die("consume", "--ack-every-ms needs --manual-ack N")
	}
	if *manualAck > 0 {
		if err := ch.Qos(*prefetch, 0, false); err != nil {
			die("consume", "basic.qos: %v", err)
		}
	}
	deliveries, err := ch.Consume(*queue, "", *manualAck == 0 /* auto-ack */, false, false, false, nil)
	if err != nil {
		die("consume", "basic.consume: %v", err)
	}
	if *ready != "" {
		if err := os.WriteFile(*ready, nil, 0o644); err != nil {
			die("consume", "%v", err)
		}
	}

	lat := make([]float64, 0, *count)
	seen := make([]bool, *count)
	var received, dup, foreign, early int
	var firstUs, lastUs int64
	minDue, maxDue := int64(math.MaxInt64), int64(0)
	quiet := time.NewTimer(time.Duration(*firstWait) * time.Second)
	// --manual-ack: the way delay-bridge takes its ingress (ontime.sh's both hops): a multiple ack
	// per N messages, and with --ack-every-ms once T ms passed with messages unacked.
	var unacked int
	var lastTag uint64
	var ackTick <-chan time.Time
	if *ackEvery > 0 {
		t := time.NewTicker(time.Duration(*ackEvery) * time.Millisecond)
		defer t.Stop()
		ackTick = t.C
	}
	ack := func() {
		if unacked > 0 {
			if err := ch.Ack(lastTag, true); err != nil {
				die("consume", "basic.ack: %v", err)
			}
			unacked = 0
		}
	}
loop:
	for len(lat) < *count {
		select {
		case d, ok := <-deliveries:
			if !ok {
				fmt.Fprintln(os.Stderr, "pace consume: the channel closed")
				break loop
			}
			now := epochUs(time.Now())
			received++
			var run, seq int
			var sentUs, delayMs int64
			n, _ := fmt.Sscanf(string(d.Body), "pace1 run=%d seq=%d sent_us=%d delay_ms=%d;",
				&run, &seq, &sentUs, &delayMs)
			switch {
			case n != 4 || run != *tag || seq < 0 || seq >= *count:
				foreign++
			case seen[seq]:
				dup++
			default:
				seen[seq] = true
				due := sentUs + delayMs*1000
				l := float64(now-due) / 1000
				if l < 0 {
					early++
				}
				lat = append(lat, l)
				if firstUs == 0 {
					firstUs = now
				}
				lastUs = now
				if due/1000 < minDue {
					minDue = due / 1000
				}
				if due/1000 > maxDue {
					maxDue = due / 1000
				}
			}
			if *manualAck > 0 {
				lastTag = d.DeliveryTag
				if unacked++; unacked >= *manualAck {
					ack()
				}
			}
			if !quiet.Stop() {
				<-quiet.C
			}
			quiet.Reset(time.Duration(*idle) * time.Second)
		case <-ackTick:
			ack()
		case <-quiet.C:
			fmt.Fprintf(os.Stderr, "pace consume: nothing for a while: stopping with %d of %d\n", len(lat), *count)
			break loop
		}
	}

	ack()
	mean := 0.0
	for _, l := range lat {
		mean += l
	}
	if len(lat) > 0 {
		mean /= float64(len(lat))
	} else {
		minDue = 0
	}
	sort.Float64s(lat)
	secs := float64(lastUs-firstUs) / 1e6
	r := 0.0
	if secs > 0 {
		r = float64(len(lat)) / secs
	}
	lo, hi := 0.0, 0.0
	if len(lat) > 0 {
		lo, hi = lat[0], lat[len(lat)-1]
	}
	fmt.Printf("pace_consume gen=%s queue=%s expected=%d received=%d unique=%d dup=%d foreign=%d early=%d "+
		"seconds=%.3f rate=%.0f first_recv_ms=%d last_recv_ms=%d min_due_ms=%d max_due_ms=%d "+
		"lat_min_ms=%.3f lat_p50_ms=%.1f lat_p90_ms=%.1f lat_p99_ms=%.1f lat_p999_ms=%.1f "+
		"lat_max_ms=%.1f lat_mean_ms=%.1f\n",
		gen, *queue, *count, received, len(lat), dup, foreign, early, secs, r, firstUs/1000, lastUs/1000,
		minDue, maxDue, lo, pct(lat, 50), pct(lat, 90), pct(lat, 99), pct(lat, 99.9), hi, mean)
	conn.Close()
	if len(lat) < *count {
		os.Exit(1)
	}
}
