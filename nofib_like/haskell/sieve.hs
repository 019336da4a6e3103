{-# OPTIONS_GHC -feager-blackholing #-}
-- Eager blackholing: a spark and its maker never both evaluate the same
-- thunk (GHC user guide, "parallel Haskell"), the fair twin of capstan's
-- exactly-once sparks.
{-# LANGUAGE BangPatterns, MonoLocalBinds #-}
-- sieve: count the primes below n with a segmented sieve of Eratosthenes.
-- The base primes up to sqrt(n) are sieved sequentially, then a lazy list
-- of 64 KiB segments (a byte per number), one spark each: a segment
-- crosses out the base primes' multiples and counts what is left; the
-- counts are summed in order.  Metrics: ms; sparks=na.  Check: equal to a
-- plain sequential sieve outside the timed region (pi(2,000,000) = 148933).
-- Haskell twin of nofib_like/sieve.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception (evaluate)
import Control.Monad (when)
import Control.Monad.ST (ST, runST)
import Control.Parallel (par, pseq)
import Data.Array.Base (unsafeAt, unsafeRead, unsafeWrite)
import Data.Array.ST (STUArray, newArray, runSTUArray)
import Data.Array.Unboxed (UArray, listArray)
import Data.List (foldl')
import Data.Word (Word8)
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

kSegment :: Int
kSegment = 64 * 1024   -- numbers per segment; same constant in the C++ program

newBytes :: Int -> ST s (STUArray s Int Word8)
newBytes m = newArray (0, m - 1) 1

-- | Plain sieve: flags ! i == 1 iff i < n is prime.
sieveFlags :: Int -> UArray Int Word8
sieveFlags n = runSTUArray $ do
  fl <- newBytes n
  mapM_ (\i -> unsafeWrite fl i 0) (takeWhile (< n) [0, 1])
  let outer !p
        | p * p >= n = return fl
        | otherwise = do
            isP <- unsafeRead fl p
            when (isP == 1) $ cross (p * p) p
            outer (p + 1)
      cross !m !p = when (m < n) $ unsafeWrite fl m 0 >> cross (m + p) p
  outer 2

-- | Primes in [lo, hi), crossed out by the base primes (all p with p*p < hi).
countSegment :: UArray Int Int -> Int -> Int -> Int -> Int
countSegment base nb lo hi = runST $ do
  seg <- newBytes (hi - lo)
  let cross !i
        | i >= nb || p * p >= hi = return ()
        | otherwise = mark (max (p * p) ((lo + p - 1) `div` p * p)) >> cross (i + 1)
        where
          p = unsafeAt base i
          mark !m = when (m < hi) $ unsafeWrite seg (m - lo) 0 >> mark (m + p)
      count !i !c
        | i >= hi = return c
        | otherwise = do
            x <- unsafeRead seg (i - lo)
            count (i + 1) (c + fromIntegral x)
  cross 0
  count (max lo 2) 0

psieve :: Int -> Int
psieve n = base `pseq` foldr par () counts `pseq` foldl' (+) 0 counts
  where
    root = head [r | r <- [1 ..], r * r >= n]   -- base primes: p < root
    small = sieveFlags root
    ps = [p | p <- [2 .. root - 1], unsafeAt small p == 1]
    nb = length ps
    base = listArray (0, nb - 1) ps :: UArray Int Int
    counts = [countSegment base nb lo (min n (lo + kSegment)) | lo <- [0, kSegment .. n - 1]]

body :: Int -> IO (Double, Bool)
body n = do
  t0 <- getMonotonicTimeNSec
  !got <- evaluate (psieve n)
  t1 <- getMonotonicTimeNSec
  let fl = sieveFlags n
      !want = foldl' (\c i -> c + fromIntegral (unsafeAt fl i)) 0 [0 .. n - 1] :: Int
  return (fromIntegral (t1 - t0) / 1e6, got == want)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 2000000
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n >>= putMVar r)   -- timed body runs in an unbound thread
  (ms, ok) <- takeMVar r
  printf "capstan-bench name=sieve impl=ghc caps=%d n=%d ms=%.3f sparks=na check=%s\n"
    caps n ms (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
