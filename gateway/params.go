package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// pathParam returns a path parameter decoded exactly once, whichever form echo routed on: echo
// matches the raw (still escaped) path when the request's escaping differs from Go's default,
// and the decoded path otherwise. Every route reads its parameters through here, so
// "order%3A42" always means the id "order:42".
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	out, err := url.PathUnescape(v)
	if err != nil {
		return "", &courier.Error{Code: courier.CodeInvalid, Message: name + " in the path is not valid percent-encoding",
			Details: map[string]any{"field": name}}
	}
	return out, nil
}

// pathID reads a path parameter that follows courier's id rule (courier.CheckID).
func pathID(c echo.Context, name string) (string, error) {
	v, err := pathParam(c, name)
	if err != nil {
		return "", err
	}
	return v, courier.CheckID(name, v)
}

// pathName reads a path parameter that follows the name rule (courier.CheckName).
func pathName(c echo.Context, name string) (string, error) {
	v, err := pathParam(c, name)
	if err != nil {
		return "", err
	}
	return v, courier.CheckName(name, v)
}

// pathInt reads a positive integer path parameter.
func pathInt(c echo.Context, name string) (int64, error) {
	v, err := pathParam(c, name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, &courier.Error{Code: courier.CodeInvalid, Message: name + " in the path must be a positive integer",
			Details: map[string]any{"field": name}}
	}
	return n, nil
}

// queryInt reads an optional integer query parameter within [lo, hi]; def when absent.
func queryInt(c echo.Context, name string, def, lo, hi int) (int, error) {
	raw := c.QueryParam(name)
	if raw == "" {
		return def, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		return 0, &courier.Error{Code: courier.CodeInvalid, Message: fmt.Sprintf("%s must be an integer from %d to %d", name, lo, hi),
			Details: map[string]any{"field": name}}
	}
	return n, nil
}

// queryBool reads an optional true/false query parameter (false when absent).
func queryBool(c echo.Context, name string) (bool, error) {
	switch c.QueryParam(name) {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, &courier.Error{Code: courier.CodeInvalid, Message: name + " must be true or false",
		Details: map[string]any{"field": name}}
}

// queryTime reads an optional RFC 3339 time query parameter (zero when absent).
func queryTime(c echo.Context, name string) (time.Time, error) {
	raw := c.QueryParam(name)
	if raw == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return time.Time{}, &courier.Error{Code: courier.CodeInvalid, Message: name + " must be an RFC 3339 time such as 2026-01-02T15:04:05Z",
			Details: map[string]any{"field": name}}
	}
	return t, nil
}

// Paging (docs/api.md, "Lists and paging"): every paged list takes limit and page_token and
// answers next_page_token.
const (
	defaultPageLimit = 100
	maxPageLimit     = 1000
)

// queryLimit reads a list's page size, limit (1 to maxPageLimit, default 100).
func queryLimit(c echo.Context) (int, error) {
	return queryInt(c, "limit", defaultPageLimit, 1, maxPageLimit)
}

// refuseRenamed refuses a query parameter renamed before 1.0 (CHANGELOG.md lists each rename;
// no old name is kept as an alias): 400 naming the old and the new name, never ignored.
func refuseRenamed(c echo.Context, old, name string) error {
	if _, ok := c.QueryParams()[old]; !ok {
		return nil
	}
	return &courier.Error{Code: courier.CodeInvalid, Message: fmt.Sprintf("unknown query parameter %s: it was renamed %s (CHANGELOG.md)", old, name),
		Details: map[string]any{"field": old, "use": name}}
}

// keyPage is one page of a list the gateway holds whole (business types, queues, pauses),
// paged like every list (docs/api.md, "Lists and paging"): sorted by key, limit items after the
// token's key, and a next_page_token while more remain. The token is sealed to list, the
// list's name and filters, and holds the page's last key, so an item added or removed between
// two pages neither repeats nor hides another.
func keyPage[T any](c echo.Context, pages *pageTokens, list string, items []T, key func(T) string) (api.List[T], error) {
	limit, err := queryLimit(c)
	if err != nil {
		return api.List[T]{}, err
	}
	ctx := c.Request().Context()
	after, err := pages.open(ctx, list, c.QueryParam("page_token"))
	if err != nil {
		return api.List[T]{}, err
	}
	slices.SortFunc(items, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	start := 0
	if after != nil {
		start, _ = slices.BinarySearchFunc(items, string(after), func(it T, k string) int { return strings.Compare(key(it), k) })
		if start < len(items) && key(items[start]) == string(after) {
			start++
		}
	}
	out := api.List[T]{Items: append([]T{}, items[start:min(start+limit, len(items))]...)}
	if start+limit < len(items) {
		if out.NextPageToken, err = pages.seal(ctx, list, []byte(key(out.Items[len(out.Items)-1]))); err != nil {
			return api.List[T]{}, err
		}
	}
	return out, nil
}

// getOne answers GET of the one resource the path parameter param names (read by key: pathID
// or pathName): get reads it and show makes it what the API shows.
func getOne[T, O any](c echo.Context, key func(echo.Context, string) (string, error), param string,
	get func(context.Context, string) (T, error), show func(context.Context, T) (O, error)) error {
	k, err := key(c, param)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	v, err := get(ctx, k)
	if err != nil {
		return err
	}
	out, err := show(ctx, v)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

// deleteOne answers DELETE of the one resource the path parameter param names (read by key)
// with 204 once del has removed it.
func deleteOne(c echo.Context, key func(echo.Context, string) (string, error), param string,
	del func(context.Context, string) error) error {
	k, err := key(c, param)
	if err != nil {
		return err
	}
	if err := del(c.Request().Context(), k); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// answerPage answers a list with the page that page reads from the request's query.
func answerPage[T any](c echo.Context, page func(echo.Context) (T, error)) error {
	p, err := page(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}

// answerAt runs do on the one resource the path's two keys name (keys reads them: taskPath,
// timerPath) and answers what it returns with status.
func answerAt[K, T any](c echo.Context, status int, keys func(echo.Context) (string, K, error),
	do func(context.Context, string, K) (T, error)) error {
	_, _, v, err := readAt(c, keys, do)
	if err != nil {
		return err
	}
	return c.JSON(status, v)
}

// readAt runs do on the one resource the path's two keys name (keys reads them) and returns
// the keys with what do returns.
func readAt[K, T any](c echo.Context, keys func(echo.Context) (string, K, error),
	do func(context.Context, string, K) (T, error)) (string, K, T, error) {
	a, b, err := keys(c)
	if err != nil {
		var zero T
		return a, b, zero, err
	}
	v, err := do(c.Request().Context(), a, b)
	return a, b, v, err
}
