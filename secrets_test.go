package courier_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

func TestSigningSecretRule(t *testing.T) {
	t.Parallel()
	key, err := courier.SigningKey("whsec_c2VjcmV0c2VjcmV0c2VjcmV0")
	require.NoError(t, err)
	require.Equal(t, []byte("secretsecretsecret"), key)
	require.NoError(t, courier.CheckSigningSecret("secrets", "whsec_c2VjcmV0c2VjcmV0c2VjcmV0"))

	for name, bad := range map[string]string{
		"no prefix":     "c2VjcmV0c2VjcmV0c2VjcmV0",
		"empty":         "",
		"prefix only":   "whsec_",
		"not base64":    "whsec_!!!!!!!!!!!!!!!!!!!!!!!!",
		"short key":     "whsec_c2hvcnQ=", // "short": 5 bytes
		"15-byte key":   "whsec_MTIzNDU2Nzg5MDEyMzQ1",
		"url alphabet":  "whsec_c2VjcmV0c2VjcmV0c2Vjc-_-",
		"other scheme":  "sk_c2VjcmV0c2VjcmV0c2VjcmV0",
		"trailing junk": "whsec_c2VjcmV0c2VjcmV0c2VjcmV0 ",
	} {
		_, err := courier.SigningKey(bad)
		require.Error(t, err, name)
		err = courier.CheckSigningSecret("secrets", bad)
		require.Equal(t, courier.CodeValidation, courier.ErrorCode(err), name)
		var e *courier.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, "secrets must be whsec_ followed by base64 of at least 16 random bytes", e.Message, name)
		require.Equal(t, "secrets", e.Details["field"], name)
	}
	_, err = courier.SigningKey("plain")
	require.EqualError(t, err, `must start with "whsec_"`)
	_, err = courier.SigningKey("whsec_c2hvcnQ=")
	require.EqualError(t, err, "is not base64 of at least 16 bytes")
}
