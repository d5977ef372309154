package gateway

import (
	"context"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
)

// KeyStore resolves API tokens.
type KeyStore interface {
	LookupAPIKey(ctx context.Context, token string) (apikey.Key, error)
}

const ctxKey = "courier.apikey"

// requireScope authenticates the Bearer token, counts the request against the key's rate
// (admission control) and checks the key carries scope (admin carries all).
func requireScope(keys KeyStore, adm *admission, scope apikey.Scope) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Request().Header.Get("Authorization")
			token, ok := strings.CutPrefix(h, "Bearer ")
			if !ok || strings.TrimSpace(token) == "" {
				return courier.Errorf(courier.CodeUnauthenticated, "missing API key: send Authorization: Bearer <key>")
			}
			key, err := keys.LookupAPIKey(c.Request().Context(), strings.TrimSpace(token))
			if err != nil {
				return err
			}
			if err := adm.admitKey(key); err != nil {
				return err
			}
			if !key.Allows(scope) {
				return courier.Errorf(courier.CodePermissionDenied, "API key %s lacks the %s scope", key.ID, scope)
			}
			c.Set(ctxKey, key)
			return next(c)
		}
	}
}
