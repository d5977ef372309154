package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/store"
)

func TestBizTypes(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		b := courier.BizType{Name: "order.close", Delivery: courier.DeliveryHTTP,
			CallbackURL: "https://orders.example/callbacks", Secrets: []string{"whsec_c2VjcmV0c2VjcmV0c2VjcmV0"}, RateLimit: 5}
		got, created, err := s.PutBizType(ctx, b)
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, 10*time.Second, got.RequestTimeout, "defaults applied")
		require.Equal(t, 10, got.MaxAttempts)
		require.Equal(t, b.Secrets, got.Secrets)
		require.Equal(t, 5.0, got.RateLimit)

		b.MaxAttempts, b.AllowPrivate = 3, true
		got, created, err = s.PutBizType(ctx, b)
		require.NoError(t, err)
		require.False(t, created, "a second PUT replaces")
		require.Equal(t, 3, got.MaxAttempts)
		require.True(t, got.AllowPrivate)

		_, _, err = s.PutBizType(ctx, courier.BizType{Name: "Bad Name", Delivery: courier.DeliveryMQ, Topic: "x"})
		require.Equal(t, courier.CodeInvalid, courier.ErrorCode(err), "a name that breaks the name rule")
		_, _, err = s.PutBizType(ctx, courier.BizType{Name: "purge", Delivery: courier.DeliveryMQ, Topic: "$JS.API.STREAM.PURGE.ORDERS"})
		require.Equal(t, courier.CodeInvalid, courier.ErrorCode(err), "a broker control subject is never a business type's topic")
		_, _, err = s.PutBizType(ctx, courier.BizType{Name: "nosecret", Delivery: courier.DeliveryHTTP, CallbackURL: "https://x.example"})
		require.Equal(t, courier.CodeValidation, courier.ErrorCode(err))

		_, _, err = s.PutBizType(ctx, courier.BizType{Name: "coupon.expiry", Delivery: courier.DeliveryMQ, Topic: "coupons.expiring"})
		require.NoError(t, err)
		all, err := s.ListBizTypes(ctx)
		require.NoError(t, err)
		require.Len(t, all, 2)
		require.Equal(t, "coupon.expiry", all[0].Name)

		require.NoError(t, s.DeleteBizType(ctx, "coupon.expiry"))
		_, err = s.GetBizType(ctx, "coupon.expiry")
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(s.DeleteBizType(ctx, "coupon.expiry")))
	})
}

func TestBizTypePutKeepsSecretsUnlessGiven(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		first, second := "whsec_Zmlyc3RmaXJzdGZpcnN0Zmlyc3Q=", "whsec_c2Vjb25kc2Vjb25kc2Vjb25k"
		b := courier.BizType{Name: "order.close", Delivery: courier.DeliveryHTTP, CallbackURL: "https://orders.example/cb",
			Secrets: []string{first}}
		_, _, err := s.PutBizType(ctx, b)
		require.NoError(t, err)

		b.Secrets, b.MaxAttempts = nil, 3
		got, created, err := s.PutBizType(ctx, b)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, 3, got.MaxAttempts, "the rest is replaced")
		require.Equal(t, []string{first}, got.Secrets, "a PUT without secrets keeps the stored ones")
		stored, err := s.GetBizType(ctx, "order.close")
		require.NoError(t, err)
		require.Equal(t, []string{first}, stored.Secrets)

		b.Secrets = []string{second, first}
		got, _, err = s.PutBizType(ctx, b)
		require.NoError(t, err)
		require.Equal(t, []string{second, first}, got.Secrets, "a PUT with secrets replaces them")
		b.Secrets = []string{second}
		got, _, err = s.PutBizType(ctx, b)
		require.NoError(t, err)
		require.Equal(t, []string{second}, got.Secrets, "and ends a rotation")

		_, _, err = s.PutBizType(ctx, courier.BizType{Name: "fresh", Delivery: courier.DeliveryHTTP, CallbackURL: "https://orders.example/cb"})
		require.Equal(t, courier.CodeValidation, courier.ErrorCode(err), "nothing stored to keep")
		var e *courier.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, "secrets", e.Details["field"])
	})
}
