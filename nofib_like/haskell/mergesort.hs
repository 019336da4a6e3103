{-# OPTIONS_GHC -feager-blackholing #-}
-- Eager blackholing: a spark and its maker never both evaluate the same
-- thunk (GHC user guide, "parallel Haskell"), the fair twin of capstan's
-- exactly-once sparks.
{-# LANGUAGE BangPatterns #-}
-- mergesort: sort n pseudo-random 32-bit ints (fixed seed, the same 64-bit
-- LCG as the C++ program).  Unboxed immutable arrays: above the cutoff the
-- left half's sort is sparked while the right half is sorted, then the two
-- sorted halves are merged into a fresh array; at or below it, a
-- sequential bottom-up merge sort in ST.  Metrics: ms; sparks=na.
-- Check: the result is sorted and equals the sequential sort of the whole
-- input (computed outside the timed region).
-- Haskell twin of nofib_like/mergesort.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception (evaluate)
import Control.Monad (forM_, when)
import Control.Monad.ST (ST)
import Control.Parallel (par, pseq)
import Data.Array.Base (unsafeAt, unsafeRead, unsafeWrite)
import Data.Array.ST (STUArray, newArray_, runSTUArray)
import Data.Array.Unboxed (UArray, bounds, listArray)
import Data.Bits (shiftR)
import Data.Word (Word32, Word64)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

type Arr = UArray Int Word32

size :: Arr -> Int
size a = let (lo, hi) = bounds a in hi - lo + 1

-- | Merge the sorted runs src[lo..mid) and src[mid..hi) into dst[lo..hi).
mergeInto :: (Int -> ST s Word32) -> STUArray s Int Word32 -> Int -> Int -> Int -> ST s ()
{-# INLINE mergeInto #-}
mergeInto src dst lo mid hi = go lo mid lo
  where
    go !i !j !k
      | k >= hi   = return ()
      | i >= mid  = src j >>= unsafeWrite dst k >> go i (j + 1) (k + 1)
      | j >= hi   = src i >>= unsafeWrite dst k >> go (i + 1) j (k + 1)
      | otherwise = do
          x <- src i
          y <- src j
          if y < x then unsafeWrite dst k y >> go i (j + 1) (k + 1)
                   else unsafeWrite dst k x >> go (i + 1) j (k + 1)

-- | Sequential bottom-up merge sort of inp[lo..hi), ping-ponging between
-- two mutable buffers.
seqSort :: Arr -> Int -> Int -> Arr
seqSort inp lo hi = runSTUArray $ do
  let n = hi - lo
  a <- newArray_ (0, n - 1)
  b <- newArray_ (0, n - 1)
  forM_ [0 .. n - 1] $ \i -> unsafeWrite a i (unsafeAt inp (lo + i))
  let pass !w src dst
        | w >= n    = return src
        | otherwise = do
            forM_ [0, 2 * w .. n - 1] $ \l ->
              mergeInto (unsafeRead src) dst l (min n (l + w)) (min n (l + 2 * w))
            pass (2 * w) dst src
  pass 1 a b

-- | Merge two sorted arrays into a fresh one.
merge :: Arr -> Arr -> Arr
merge l r = runSTUArray $ do
  let nl = size l
      n = nl + size r
      at i = return $! if i < nl then unsafeAt l i else unsafeAt r (i - nl)
  dst <- newArray_ (0, n - 1)
  mergeInto at dst 0 nl n
  return dst

-- | Sort inp[lo..hi) into a fresh array.
msort :: Int -> Arr -> Int -> Int -> Arr
msort cutoff inp lo hi
  | hi - lo <= cutoff || hi - lo < 2 = seqSort inp lo hi
  | otherwise = left `par` (right `pseq` merge left right)
  where
    mid = lo + (hi - lo) `div` 2
    left = msort cutoff inp lo mid
    right = msort cutoff inp mid hi

input :: Int -> Arr
input n = listArray (0, n - 1) (map (fromIntegral . (`shiftR` 32)) (tail (iterate step 42)))
  where step x = x * 6364136223846793005 + 1442695040888963407 :: Word64

body :: Int -> Int -> IO (Double, Bool)
body n cutoff = do
  inp <- evaluate (input n)
  want <- evaluate (seqSort inp 0 n)
  t0 <- getMonotonicTimeNSec
  got <- evaluate (msort cutoff inp 0 n)
  t1 <- getMonotonicTimeNSec
  let sorted = and [unsafeAt got (i - 1) <= unsafeAt got i | i <- [1 .. n - 1]]
      same = size got == n && and [unsafeAt got i == unsafeAt want i | i <- [0 .. n - 1]]
  return (fromIntegral (t1 - t0) / 1e6, sorted && same)

main :: IO ()
main = do
  args <- getArgs
  let (n, cutoff) = case args of
        (a : b : _) -> (read a, read b)
        [a]         -> (read a, 10000)
        []          -> (5000000, 10000)
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n cutoff >>= putMVar r)   -- timed body runs in an unbound thread
  (ms, ok) <- takeMVar r
  printf "capstan-bench name=mergesort impl=ghc caps=%d n=%d ms=%.3f sparks=na check=%s\n"
    caps n ms (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
