-- Directed triangles of the follower graph, counted per node (IVM-epsilon).
CREATE TABLE follows(src INT, dst INT);

SELECT f1.src AS user_id, COUNT(*) AS triangles
FROM follows f1, follows f2, follows f3
WHERE f1.dst = f2.src AND f2.dst = f3.src AND f3.dst = f1.src
GROUP BY f1.src;
