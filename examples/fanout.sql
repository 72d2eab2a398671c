-- Per user: number of (follower, followee) pairs around them, and the sum of followee ids.
CREATE TABLE follows(src INT, dst INT);

SELECT f1.dst AS user_id, COUNT(*) AS pairs, SUM(f2.dst) AS followee_sum
FROM follows f1, follows f2
WHERE f1.dst = f2.src
GROUP BY f1.dst;
