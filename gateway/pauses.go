package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
)

// PauseService is flow control's pause and resume (pauses.Service): what the API's
// /v1/pauses routes and the console's pause and resume buttons call.
type PauseService interface {
	Pause(ctx context.Context, p courier.Pause) (courier.Pause, bool, error)
	Resume(ctx context.Context, kind courier.PauseKind, name string) (courier.Pause, error)
	List(ctx context.Context) ([]courier.Pause, error)
}

// keyName says which API key made a request, for a pause's paused_by.
func keyName(k apikey.Key) string {
	return fmt.Sprintf("api key %s (%s)", k.Name, k.ID)
}

// pauses reads the pauses in force, for the "paused" field of what the gateway shows: none
// when the gateway has no pause service.
func (h *handlers) pauses(ctx context.Context) (courier.Pauses, error) {
	if h.d.Pauses == nil {
		return courier.NewPauses(nil), nil
	}
	list, err := h.d.Pauses.List(ctx)
	if err != nil {
		return courier.Pauses{}, err
	}
	return courier.NewPauses(list), nil
}

// listPauses is GET /v1/pauses: every pause in force, by kind and name.
func (h *handlers) listPauses(c echo.Context) error {
	kind := courier.PauseKind(c.QueryParam("kind"))
	if kind != "" && !kind.Valid() {
		return &courier.Error{Code: courier.CodeInvalid, Message: fmt.Sprintf("kind must be one of %v", courier.PauseKinds),
			Details: map[string]any{"field": "kind"}}
	}
	list, err := h.d.Pauses.List(c.Request().Context())
	if err != nil {
		return err
	}
	items := []api.Pause{}
	for _, p := range list {
		if kind == "" || p.Kind == kind {
			items = append(items, api.PauseOf(p))
		}
	}
	out, err := keyPage(c, h.pages, "pauses\x00"+string(kind), items, func(p api.Pause) string { return string(p.Kind) + "\x00" + p.Name })
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

// pause is POST /v1/pauses: 201 with the new pause, or 200 with the one already in force.
func (h *handlers) pause(c echo.Context) error {
	var req api.PauseRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	key, _ := c.Get(ctxKey).(apikey.Key)
	p, created, err := h.d.Pauses.Pause(c.Request().Context(),
		courier.Pause{Kind: req.Kind, Name: req.Name, Reason: req.Reason, PausedBy: keyName(key)})
	if err != nil {
		return err
	}
	if created {
		return c.JSON(http.StatusCreated, api.PauseOf(p))
	}
	return c.JSON(http.StatusOK, api.PauseOf(p))
}

// resume is DELETE /v1/pauses/{kind}/{name}: the pause lifted, or 404 when there was none.
func (h *handlers) resume(c echo.Context) error {
	kind, err := pathParam(c, "kind")
	if err != nil {
		return err
	}
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	if err := courier.CheckPause(courier.PauseKind(kind), name, ""); err != nil {
		return err
	}
	p, err := h.d.Pauses.Resume(c.Request().Context(), courier.PauseKind(kind), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.PauseOf(p))
}
