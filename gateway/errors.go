package gateway

import (
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/timers"
)

// statusOf is the one table from courier's error codes to HTTP statuses.
var statusOf = map[courier.Code]int{
	courier.CodeInvalid:          http.StatusBadRequest,
	courier.CodeValidation:       http.StatusUnprocessableEntity,
	courier.CodeNotFound:         http.StatusNotFound,
	courier.CodeConflict:         http.StatusConflict,
	courier.CodeUnauthenticated:  http.StatusUnauthorized,
	courier.CodePermissionDenied: http.StatusForbidden,
	courier.CodeTooLarge:         http.StatusRequestEntityTooLarge,
	courier.CodeUnavailable:      http.StatusServiceUnavailable,
	courier.CodeInternal:         http.StatusInternalServerError,
	courier.CodeUnsupportedMedia: http.StatusUnsupportedMediaType,
	courier.CodeMethodNotAllowed: http.StatusMethodNotAllowed,
	courier.CodeRateLimited:      http.StatusTooManyRequests,
	courier.CodeBacklogFull:      http.StatusTooManyRequests,
}

// errorHandler answers every error: JSON for the API, a page for the console (view; nil
// without one).
func errorHandler(log *slog.Logger, view *consoleView) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status, body := render(err)
		var ce *courier.Error
		if errors.As(err, &ce) && ce.RetryAfter > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ce.RetryAfter.Seconds()))))
		}
		if status >= 500 {
			log.ErrorContext(c.Request().Context(), "request failed", "method", c.Request().Method, "path", c.Path(), "error", err)
		}
		if view != nil && isConsole(c) {
			if err := view.errorPage(c, status, body); err != nil {
				log.ErrorContext(c.Request().Context(), "render console error page", "error", err)
			}
			return
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = c.JSON(status, body)
	}
}

func render(err error) (int, api.ErrorBody) {
	if timers.TimedOut(err) { // the request's deadline, as a context error or from Temporal
		return http.StatusServiceUnavailable, api.ErrorBody{Error: api.ErrorDetail{Code: courier.CodeUnavailable,
			Message: "the request did not finish in time (a dependency is slow or down); it may still take effect, and repeating it is safe"}}
	}
	var ce *courier.Error
	if errors.As(err, &ce) {
		st, ok := statusOf[ce.Code]
		if !ok {
			st = http.StatusInternalServerError
		}
		msg := ce.Message
		if st >= 500 && ce.Code == courier.CodeInternal {
			msg = "internal error"
		}
		return st, api.ErrorBody{Error: api.ErrorDetail{Code: ce.Code, Message: msg, Details: ce.Details}}
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		code := api.CodeOfStatus(he.Code)
		msg := http.StatusText(he.Code)
		if m, ok := he.Message.(string); ok && m != "" {
			msg = m
		}
		return he.Code, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}}
	}
	return http.StatusInternalServerError, api.ErrorBody{Error: api.ErrorDetail{Code: courier.CodeInternal, Message: "internal error"}}
}
