package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/webhook"
)

// BizTypeStore is what the business-type endpoints need.
type BizTypeStore interface {
	PutBizType(ctx context.Context, b courier.BizType) (courier.BizType, bool, error)
	GetBizType(ctx context.Context, name string) (courier.BizType, error)
	ListBizTypes(ctx context.Context) ([]courier.BizType, error)
	DeleteBizType(ctx context.Context, name string) error
}

func (h *handlers) putBizType(c echo.Context) error {
	name, err := pathName(c, "name")
	if err != nil {
		return err
	}
	var req api.BizTypeConfig
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if err := checkSecrets(req.Secrets); err != nil {
		return err
	}
	b := req.Domain(name)
	// The store keeps the stored secrets when an http type names none; one that has none to
	// keep fails on the secrets field and gets a generated secret, shown once.
	generated := ""
	stored, created, err := h.d.BizTypes.PutBizType(c.Request().Context(), b)
	if b.Delivery == courier.DeliveryHTTP && len(b.Secrets) == 0 && errorField(err) == "secrets" {
		if generated, err = webhook.GenerateSecret(); err != nil {
			return err
		}
		b.Secrets = []string{generated}
		stored, created, err = h.d.BizTypes.PutBizType(c.Request().Context(), b)
	}
	if err != nil {
		return err
	}
	out, err := h.bizTypeShown(c.Request().Context(), stored)
	if err != nil {
		return err
	}
	out.GeneratedSecret = generated
	if created {
		return c.JSON(http.StatusCreated, out)
	}
	return c.JSON(http.StatusOK, out)
}

func (h *handlers) getBizType(c echo.Context) error {
	return getOne(c, pathName, "name", h.d.BizTypes.GetBizType, h.bizTypeShown)
}

// bizTypeShown is a business type as the API shows it: with its pause, if it is paused.
func (h *handlers) bizTypeShown(ctx context.Context, b courier.BizType) (api.BizType, error) {
	ps, err := h.pauses(ctx)
	if err != nil {
		return api.BizType{}, err
	}
	out := api.BizTypeOf(b)
	out.Paused = api.PausedBy(ps.BizType(b.Name))
	return out, nil
}

func (h *handlers) listBizTypes(c echo.Context) error {
	all, err := h.d.BizTypes.ListBizTypes(c.Request().Context())
	if err != nil {
		return err
	}
	ps, err := h.pauses(c.Request().Context())
	if err != nil {
		return err
	}
	items := make([]api.BizType, 0, len(all))
	for _, b := range all {
		shown := api.BizTypeOf(b)
		shown.Paused = api.PausedBy(ps.BizType(b.Name))
		items = append(items, shown)
	}
	out, err := keyPage(c, h.pages, "biz-types", items, func(b api.BizType) string { return b.Name })
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (h *handlers) deleteBizType(c echo.Context) error {
	return deleteOne(c, pathName, "name", h.d.BizTypes.DeleteBizType)
}

// errorField is the field a validation error names, or "".
func errorField(err error) string {
	var e *courier.Error
	if !errors.As(err, &e) || e.Code != courier.CodeValidation {
		return ""
	}
	field, _ := e.Details["field"].(string)
	return field
}

// checkSecrets refuses signing secrets the signer could not use (courier.CheckSigningSecret),
// before anything is stored.
func checkSecrets(secrets []string) error {
	for _, s := range secrets {
		if err := courier.CheckSigningSecret("secrets", s); err != nil {
			return err
		}
	}
	return nil
}
