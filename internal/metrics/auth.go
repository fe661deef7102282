package metrics

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long the API server's verdicts are kept (as long as controller-runtime's
// filter keeps them): a scraper asks every 15 to 60 seconds, and each verdict
// is a request to the API server. A denial is kept shortly, so that a scraper
// granted the role is let in soon.
const (
	reviewTTL  = time.Minute
	allowTTL   = 5 * time.Minute
	denyTTL    = 30 * time.Second
	maxVerdict = 256 // scrapers are few; more verdicts than this are forgotten
	askTimeout = 10 * time.Second
)

// apiServerAuth is the metrics server's filter: the API server
// authenticates the scraper's bearer token (a TokenReview) and authorizes
// the request on its non-resource URL (a SubjectAccessReview), as for
// kube-controller-manager's metrics. It does what controller-runtime's
// filters.WithAuthenticationAndAuthorization does without linking the API
// server's library, which cost the manager 10 MB of binary and 7.5 MiB of
// memory for these two requests.
func apiServerAuth(cfg *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
	a, err := newAuthorizer(cfg, hc)
	if err != nil {
		return nil, err
	}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			status, msg := a.check(r)
			if status != http.StatusOK {
				log.V(1).Info("metrics request refused", "status", status, "reason", msg)
				http.Error(w, msg, status)
				return
			}
			next.ServeHTTP(w, r)
		}), nil
	}, nil
}

// authorizer asks the API server about scrapers and keeps its verdicts.
type authorizer struct {
	tokens authenticationclient.TokenReviewInterface
	access authorizationclient.SubjectAccessReviewInterface
	now    func() time.Time

	mu        sync.Mutex
	reviews   verdicts[authenticationv1.UserInfo] // by the token's hash
	decisions verdicts[bool]                      // by the token's hash, verb and path
}

func newAuthorizer(cfg *rest.Config, hc *http.Client) (*authorizer, error) {
	authn, err := authenticationclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return &authorizer{tokens: authn.TokenReviews(), access: authz.SubjectAccessReviews(), now: time.Now,
		reviews: verdicts[authenticationv1.UserInfo]{}, decisions: verdicts[bool]{}}, nil
}

// verdict is what the API server said and until when it holds.
type verdict[T any] struct {
	value T
	until time.Time
}

type verdicts[T any] map[string]verdict[T]

func (v verdicts[T]) get(key string, now time.Time) (T, bool) {
	e, ok := v[key]
	if !ok || !now.Before(e.until) {
		var zero T
		return zero, false
	}
	return e.value, true
}

func (v verdicts[T]) put(key string, value T, until time.Time) {
	if len(v) >= maxVerdict {
		clear(v)
	}
	v[key] = verdict[T]{value: value, until: until}
}

// check returns the HTTP status for a request (200 to serve it) and why.
func (a *authorizer) check(r *http.Request) (int, string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return http.StatusUnauthorized, "Unauthorized: a bearer token is required"
	}
	token = strings.TrimSpace(token)
	sum := sha256.Sum256([]byte(token))
	id := string(sum[:])
	ctx, cancel := context.WithTimeout(r.Context(), askTimeout)
	defer cancel()
	user, ok, err := a.authenticate(ctx, id, token)
	if err != nil {
		return http.StatusInternalServerError, "Authentication failed: " + err.Error()
	}
	if !ok {
		return http.StatusUnauthorized, "Unauthorized: the API server does not accept the token"
	}
	verb := strings.ToLower(r.Method)
	allowed, err := a.authorize(ctx, id, user, verb, r.URL.Path)
	if err != nil {
		return http.StatusInternalServerError, fmt.Sprintf("Authorization for user %s failed: %v", user.Username, err)
	}
	if !allowed {
		return http.StatusForbidden, fmt.Sprintf("Forbidden: user %s may not %s %s", user.Username, verb, r.URL.Path)
	}
	return http.StatusOK, ""
}

// authenticate asks the API server who a token (id, its hash) is; a token
// it does not accept is no one (ok false), not an error.
func (a *authorizer) authenticate(ctx context.Context, id, token string) (authenticationv1.UserInfo, bool, error) {
	a.mu.Lock()
	user, ok := a.reviews.get(id, a.now())
	a.mu.Unlock()
	if ok {
		return user, true, nil
	}
	review, err := a.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, false, err
	}
	if !review.Status.Authenticated {
		return authenticationv1.UserInfo{}, false, nil
	}
	a.mu.Lock()
	a.reviews.put(id, review.Status.User, a.now().Add(reviewTTL))
	a.mu.Unlock()
	return review.Status.User, true, nil
}

// authorize asks the API server whether the user of token id may use verb
// on a non-resource path.
func (a *authorizer) authorize(ctx context.Context, id string, user authenticationv1.UserInfo, verb, path string) (bool, error) {
	key := id + "\x00" + verb + "\x00" + path
	a.mu.Lock()
	allowed, ok := a.decisions.get(key, a.now())
	a.mu.Unlock()
	if ok {
		return allowed, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(slices.Clone(v))
	}
	sar, err := a.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	ttl := denyTTL
	if sar.Status.Allowed {
		ttl = allowTTL
	}
	a.mu.Lock()
	a.decisions.put(key, sar.Status.Allowed, a.now().Add(ttl))
	a.mu.Unlock()
	return sar.Status.Allowed, nil
}
