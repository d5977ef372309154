package kafkamq

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/mq"
)

// Kafka publishing bounds.
const (
	// DefaultPort is the port of a broker address given without one.
	DefaultPort = 9092
	// DeliveryTimeout is how long a record may wait in the client for a broker before it
	// is failed (when that is safe for the idempotent producer). Publish itself gives up at its
	// context's deadline; a record it gave up on may still land within this time, which the
	// next publish of the same message makes a duplicate with the same Courier-Message-Id.
	DeliveryTimeout = 30 * time.Second
	// metadataMinAge and unknownTopicRetries bound how long a publish to a topic the cluster
	// does not have takes to fail as mq.ErrUnknownTopic: franz-go asks the cluster for the
	// topic again at most every metadataMinAge, and gives up after unknownTopicRetries answers
	// without it. franz-go's defaults (5 s, 4) take 20 s and more, longer than an outbox
	// record's first attempt (5 s), which then timed out instead of naming the missing topic.
	metadataMinAge      = 500 * time.Millisecond
	unknownTopicRetries = 3
	// UnknownTopicBound is about how long a publish to a missing topic takes to fail with
	// mq.ErrUnknownTopic: a metadata query per retry, each after metadataMinAge, plus their
	// round trips.
	UnknownTopicBound = (unknownTopicRetries + 1) * metadataMinAge * 2
)

// Publisher publishes to Apache Kafka (or a broker speaking its protocol) with an idempotent
// producer and acks=all: Publish returns nil once every in-sync replica has the record. The
// topic is the Kafka topic; the message key is the record key, so one key's records share a
// partition (franz-go's default partitioner hashes keys with murmur2, as the Java client does)
// and keep their order; the message id travels in the Courier-Message-Id header for consumers
// to deduplicate. Topics are the operator's: a topic Kafka does not have is mq.ErrUnknownTopic,
// unless the URL allows auto-creation.
type Publisher struct {
	cl     *kgo.Client
	addr   string // the URL without secrets, for errors
	recCtx context.Context
	cancel context.CancelFunc
	closed atomic.Bool
}

// config is what a kafka:// URL says.
type config struct {
	brokers    []string
	tls        *tls.Config
	sasl       sasl.Mechanism
	autoCreate bool
}

// Dial returns a Kafka publisher for a URL of the form
//
//	kafka://[user:password@]host[:port][,host[:port]...][?option=value&...]
//
// with the options tls=1 (TLS with the system's roots), tls_ca, tls_cert and tls_key (PEM
// files; any of them implies tls=1), tls_server_name, sasl=plain|scram-sha-256|scram-sha-512
// with user and password (or the URL's user info), and auto_create=1 (let the broker create a
// missing topic; off by default). The port defaults to 9092. The client connects lazily: an
// unreachable broker makes Publish and Ping fail, not Dial. clientName is the Kafka client
// id; extra franz-go options are applied last.
func Dial(rawURL, clientName string, extra ...kgo.Opt) (*Publisher, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.brokers...),
		kgo.ClientID(clientName),
		kgo.RequiredAcks(kgo.AllISRAcks()), // also what the idempotent producer (on by default) needs
		kgo.RecordDeliveryTimeout(DeliveryTimeout),
		kgo.ProducerLinger(0), // Publish waits for its record: do not hold it back for a batch
		kgo.MetadataMinAge(metadataMinAge),
		kgo.UnknownTopicRetries(unknownTopicRetries),
	}
	if cfg.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg.tls))
	}
	if cfg.sasl != nil {
		opts = append(opts, kgo.SASL(cfg.sasl))
	}
	if cfg.autoCreate {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	opts = append(opts, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("mq: Kafka client for %s: %w", mq.RedactURL(rawURL), err)
	}
	// Records outlive the Publish that gave up on them (see DeliveryTimeout); giving each
	// record its caller's context would instead fail every record buffered for its partition
	// when that one caller's context ends.
	ctx, cancel := context.WithCancel(context.Background())
	return &Publisher{cl: cl, addr: mq.RedactURL(rawURL), recCtx: ctx, cancel: cancel}, nil
}

// Client exposes the franz-go client (for tests and tools that also administer or consume).
func (k *Publisher) Client() *kgo.Client { return k.cl }

// Publish produces m and waits until Kafka has acknowledged it with acks=all.
func (k *Publisher) Publish(ctx context.Context, m mq.Message) error {
	if err := courier.CheckMessage(m.Topic, m.Key, m.Headers); err != nil {
		return fmt.Errorf("%w: %v", mq.ErrRefused, err)
	}
	if k.closed.Load() {
		return errors.New("mq: the Kafka publisher is closed")
	}
	rec := &kgo.Record{Topic: m.Topic, Value: m.Payload, Context: k.recCtx, Headers: kafkaHeaders(m)}
	if m.Key != "" {
		rec.Key = []byte(m.Key)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, mq.DefaultPublishTimeout)
		defer cancel()
	}
	done := make(chan error, 1) // the promise never blocks, whether or not Publish still waits
	k.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return k.classify(m.Topic, err)
	case <-ctx.Done():
		return fmt.Errorf("mq: publish to Kafka topic %q at %s: not acknowledged in time (retrying): %w", m.Topic, k.addr, ctx.Err())
	}
}

// kafkaHeaders are the producer's headers in name order, then courier's.
func kafkaHeaders(m mq.Message) []kgo.RecordHeader {
	names := make([]string, 0, len(m.Headers))
	for name := range m.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	hs := make([]kgo.RecordHeader, 0, len(names)+2)
	for _, name := range names {
		hs = append(hs, kgo.RecordHeader{Key: name, Value: []byte(m.Headers[name])})
	}
	hs = append(hs, kgo.RecordHeader{Key: mq.HeaderMessageID, Value: []byte(m.ID)})
	if m.Key != "" {
		hs = append(hs, kgo.RecordHeader{Key: mq.HeaderKey, Value: []byte(m.Key)})
	}
	return hs
}

func (k *Publisher) classify(topic string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return fmt.Errorf("%w %q: Kafka at %s has no such topic (create it, or set auto_create=1): %v", mq.ErrUnknownTopic, topic, k.addr, err)
	case errors.Is(err, kerr.InvalidTopicException):
		return fmt.Errorf("%w %q: Kafka at %s refuses this topic name: %v", mq.ErrUnknownTopic, topic, k.addr, err)
	case errors.Is(err, kgo.ErrClientClosed):
		return fmt.Errorf("mq: the Kafka publisher is closed: %w", err)
	}
	return fmt.Errorf("mq: publish to Kafka topic %q at %s: %w", topic, k.addr, err)
}

// Ping checks that a broker answers.
func (k *Publisher) Ping(ctx context.Context) error {
	if k.closed.Load() {
		return errors.New("mq: the Kafka publisher is closed")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, mq.DefaultPublishTimeout)
		defer cancel()
	}
	if err := k.cl.Ping(ctx); err != nil {
		return fmt.Errorf("mq: Kafka at %s does not answer: %w", k.addr, err)
	}
	return nil
}

// Close waits briefly for records in flight, then closes the client and its connections.
func (k *Publisher) Close() error {
	if k.closed.Swap(true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = k.cl.Flush(ctx) // what does not finish in time fails with ErrClientClosed below
	k.cl.Close()
	k.cancel()
	return nil
}

func parseURL(raw string) (config, error) {
	var cfg config
	bad := func(format string, args ...any) (config, error) {
		return config{}, fmt.Errorf("mq: Kafka URL %s: %s", mq.RedactURL(raw), fmt.Sprintf(format, args...))
	}
	_, rest, ok := strings.Cut(raw, "://")
	if !ok || mq.Scheme(raw) != "kafka" {
		return bad("want kafka://host:port[,host:port...][?options]")
	}
	// url.Parse does not take a list of hosts: split the parts by hand.
	rest, rawQuery, _ := strings.Cut(rest, "?")
	rest, _, _ = strings.Cut(rest, "#")
	rest = strings.TrimSuffix(rest, "/")
	if strings.Contains(rest, "/") {
		return bad("a path means nothing to Kafka")
	}
	var user, password string
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		u, p, hasPass := strings.Cut(rest[:at], ":")
		var err error
		if user, err = url.PathUnescape(u); err != nil {
			return bad("user: %v", err)
		}
		if hasPass {
			if password, err = url.PathUnescape(p); err != nil {
				return bad("password: %v", err)
			}
		}
		rest = rest[at+1:]
	}
	for _, hp := range strings.Split(rest, ",") {
		if hp == "" {
			return bad("an empty broker address")
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			host, port = strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]"), strconv.Itoa(DefaultPort)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
			return bad("broker address %q is not host:port", hp)
		}
		cfg.brokers = append(cfg.brokers, net.JoinHostPort(host, port))
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return bad("%v", err)
	}
	var useTLS bool
	var caFile, certFile, keyFile, serverName, mechanism string
	for name, vs := range q {
		v := vs[len(vs)-1]
		switch name {
		case "tls":
			if useTLS, err = strconv.ParseBool(v); err != nil {
				return bad("tls=%q is not a boolean", v)
			}
		case "tls_ca":
			caFile = v
		case "tls_cert":
			certFile = v
		case "tls_key":
			keyFile = v
		case "tls_server_name":
			serverName = v
		case "sasl":
			mechanism = strings.ToLower(v)
		case "user":
			user = v
		case "password":
			password = v
		case "auto_create":
			if cfg.autoCreate, err = strconv.ParseBool(v); err != nil {
				return bad("auto_create=%q is not a boolean", v)
			}
		default:
			return bad("unknown option %q (known: tls, tls_ca, tls_cert, tls_key, tls_server_name, sasl, user, password, auto_create)", name)
		}
	}
	if useTLS || caFile != "" || certFile != "" || keyFile != "" || serverName != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return bad("tls_ca: %v", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return bad("tls_ca %s holds no PEM certificate", caFile)
			}
		}
		if (certFile == "") != (keyFile == "") {
			return bad("tls_cert and tls_key go together")
		}
		if certFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return bad("tls_cert/tls_key: %v", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cfg.tls = tc
	}
	switch mechanism {
	case "":
		if user != "" || password != "" {
			return bad("a user or password needs sasl=plain, scram-sha-256 or scram-sha-512")
		}
	case "plain":
		cfg.sasl = plain.Auth{User: user, Pass: password}.AsMechanism()
	case "scram-sha-256":
		cfg.sasl = scram.Auth{User: user, Pass: password}.AsSha256Mechanism()
	case "scram-sha-512":
		cfg.sasl = scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
	default:
		return bad("sasl=%q: want plain, scram-sha-256 or scram-sha-512", mechanism)
	}
	if cfg.sasl != nil && user == "" {
		return bad("sasl=%s needs a user", mechanism)
	}
	return cfg, nil
}

// CheckURL reports whether Dial would accept rawURL, without connecting.
func CheckURL(rawURL string) error {
	_, err := parseURL(rawURL)
	return err
}
