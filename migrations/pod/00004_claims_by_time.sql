-- Claims by time: the Redis store's claim follower reads the recent claims
-- to find those whose Redis half was lost (redisstore.Store.FollowClaims).

-- +goose Up
ALTER TABLE reservation_claims ADD KEY idx_claims_claimed_at (claimed_at);

-- +goose Down
ALTER TABLE reservation_claims DROP KEY idx_claims_claimed_at;
