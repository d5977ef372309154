package kafkamq_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/kafkamq"
	"github.com/courier-oss/courier/mq/mqtest"
)

// kafkaCluster is an in-process kfake cluster whose brokers listen through gates the test can
// cut.
type kafkaCluster struct {
	*kfake.Cluster
	mu    sync.Mutex
	gates []*mqtest.Gate
}

func startKafka(t *testing.T, opts ...kfake.Opt) *kafkaCluster {
	t.Helper()
	kc := &kafkaCluster{}
	opts = append([]kfake.Opt{
		kfake.NumBrokers(3),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			l, err := net.Listen(network, addr)
			if err != nil {
				return nil, err
			}
			g := mqtest.NewGate(l)
			kc.mu.Lock()
			kc.gates = append(kc.gates, g)
			kc.mu.Unlock()
			return g, nil
		}),
	}, opts...)
	c, err := kfake.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	kc.Cluster = c
	return kc
}

func (kc *kafkaCluster) url(query string) string {
	u := "kafka://" + strings.Join(kc.ListenAddrs(), ",")
	if query != "" {
		u += "?" + query
	}
	return u
}

func (kc *kafkaCluster) setCut(cut bool) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	for _, g := range kc.gates {
		if cut {
			g.Cut()
		} else {
			g.Restore()
		}
	}
}

func (kc *kafkaCluster) client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...)}, opts...)...)
	require.NoError(t, err)
	return cl
}

func (kc *kafkaCluster) createTopic(t *testing.T, topic string) {
	t.Helper()
	cl := kc.client(t)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := kadm.NewClient(cl).CreateTopic(ctx, 3, -1, nil, topic)
	require.NoError(t, err)
}

// read consumes topic from the start up to the end offsets it has now.
func (kc *kafkaCluster) read(t *testing.T, topic string) []mqtest.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	admin := kc.client(t)
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, topic)
	admin.Close()
	require.NoError(t, err)
	require.NoError(t, ends.Error())
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil
	}
	cons := kc.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cons.Close()
	var recs []*kgo.Record
	next := map[int32]int64{}
	for {
		done := true
		for p, end := range want {
			done = done && next[p] >= end
		}
		if done {
			break
		}
		fs := cons.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s: have %v of %v", topic, next, want)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		fs.EachRecord(func(r *kgo.Record) {
			recs = append(recs, r)
			next[r.Partition] = r.Offset + 1
		})
	}
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	out := make([]mqtest.Received, 0, len(recs))
	for _, r := range recs {
		got := mqtest.Received{Key: string(r.Key), Payload: r.Value, Headers: map[string]string{}}
		for _, h := range r.Headers {
			got.Headers[h.Key] = string(h.Value)
		}
		got.ID = got.Headers[mq.HeaderMessageID]
		out = append(out, got)
	}
	return out
}

// The publisher conformance suite against franz-go's in-process Kafka cluster (three brokers,
// topics of three partitions); cutting it closes every broker connection and refuses new ones.
func TestKafkaConformance(t *testing.T) {
	kc := startKafka(t)
	mqtest.Run(t, mqtest.Harness{
		NewPublisher: func(t *testing.T) mq.Publisher {
			pub, err := kafkamq.Dial(kc.url(""), "conformance")
			require.NoError(t, err)
			return pub
		},
		CreateTopic: kc.createTopic,
		Read:        kc.read,
		Cut:         func(*testing.T) { kc.setCut(true) },
		Restore:     func(*testing.T) { kc.setCut(false) },
	})
}

// With auto_create=1 (and a broker that allows it) a missing topic is created on first
// publish; without it, the same cluster answers ErrUnknownTopic.
func TestKafkaAutoCreate(t *testing.T) {
	kc := startKafka(t, kfake.AllowAutoTopicCreation())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	strict, err := kafkamq.Dial(kc.url(""), "strict")
	require.NoError(t, err)
	defer strict.Close()
	// A missing topic is named as such within the bound the docs state, well inside an outbox
	// record's first attempt (5 s), rather than ending that attempt as a timeout.
	bctx, bcancel := context.WithTimeout(ctx, kafkamq.UnknownTopicBound)
	defer bcancel()
	err = strict.Publish(bctx, mq.Message{ID: "1", Topic: "auto.off", Payload: []byte("x")})
	require.ErrorIs(t, err, mq.ErrUnknownTopic)

	auto, err := kafkamq.Dial(kc.url("auto_create=1"), "auto")
	require.NoError(t, err)
	defer auto.Close()
	require.NoError(t, auto.Publish(ctx, mq.Message{ID: "2", Topic: "auto.on", Key: "k", Payload: []byte("y")}))
	got := kc.read(t, "auto.on")
	require.Len(t, got, 1)
	require.Equal(t, "2", got[0].ID)
}

// SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 from the URL; a wrong password is an error that
// is neither an unknown topic nor a refusal.
func TestKafkaSASL(t *testing.T) {
	kc := startKafka(t,
		kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-pass"),
		kfake.Superuser("SCRAM-SHA-256", "scram256", "pass 256"),
		kfake.Superuser("SCRAM-SHA-512", "scram512", "pass&512"),
		kfake.SeedTopics(1, "sasl.topic"),
	)
	addrs := strings.Join(kc.ListenAddrs(), ",")
	for _, c := range []struct{ name, url string }{
		{"plain in the query", "kafka://" + addrs + "?sasl=plain&user=plain-user&password=plain-pass"},
		{"scram-sha-256 in the user info", "kafka://scram256:" + url.PathEscape("pass 256") + "@" + addrs + "?sasl=scram-sha-256"},
		{"scram-sha-512 in the query", "kafka://" + addrs + "?sasl=SCRAM-SHA-512&user=scram512&password=" + url.QueryEscape("pass&512")},
	} {
		t.Run(c.name, func(t *testing.T) {
			pub, err := kafkamq.Dial(c.url, "sasl")
			require.NoError(t, err)
			defer pub.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			require.NoError(t, pub.Ping(ctx))
			require.NoError(t, pub.Publish(ctx, mq.Message{ID: c.name, Topic: "sasl.topic", Payload: []byte("x")}))
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		pub, err := kafkamq.Dial("kafka://"+addrs+"?sasl=scram-sha-256&user=scram256&password=nope", "sasl")
		require.NoError(t, err)
		defer pub.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		err = pub.Publish(ctx, mq.Message{ID: "w", Topic: "sasl.topic", Payload: []byte("x")})
		require.Error(t, err)
		require.NotErrorIs(t, err, mq.ErrUnknownTopic)
		require.NotErrorIs(t, err, mq.ErrRefused)
		require.Error(t, pub.Ping(ctx))
	})
}

// TLS from the URL: a broker certificate signed by the tls_ca file is trusted; without it the
// system roots refuse it.
func TestKafkaTLS(t *testing.T) {
	caPEM, serverCert := testCertificates(t)
	kc := startKafka(t,
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}),
		kfake.SeedTopics(1, "tls.topic"),
	)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))

	pub, err := kafkamq.Dial(kc.url("tls_ca="+url.QueryEscape(caFile)), "tls")
	require.NoError(t, err)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, pub.Publish(ctx, mq.Message{ID: "1", Topic: "tls.topic", Payload: []byte("x")}))

	untrusted, err := kafkamq.Dial(kc.url("tls=1"), "tls")
	require.NoError(t, err)
	defer untrusted.Close()
	sctx, scancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer scancel()
	err = untrusted.Publish(sctx, mq.Message{ID: "2", Topic: "tls.topic", Payload: []byte("x")})
	require.Error(t, err, "a certificate the system roots do not know is refused")
	require.NotErrorIs(t, err, mq.ErrUnknownTopic)
}

// testCertificates returns a CA certificate (PEM) and a server certificate for 127.0.0.1 it
// signed.
func testCertificates(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "courier test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err = x509.ParseCertificate(caDER)
	require.NoError(t, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key}
}
