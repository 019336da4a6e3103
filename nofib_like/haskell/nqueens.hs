{-# OPTIONS_GHC -feager-blackholing #-}
-- Eager blackholing: a spark and its maker never both evaluate the same
-- thunk (GHC user guide, "parallel Haskell"), the fair twin of capstan's
-- exactly-once sparks.
{-# LANGUAGE BangPatterns #-}
-- nqueens: count all solutions of the n-queens problem (bitmask search).
-- Every candidate placement in the first d rows is a spark; below row d the
-- search is sequential.  A node sparks all its children, then sums them in
-- order.  Metrics: ms; sparks=na.  Check: the known solution counts.
-- Haskell twin of nofib_like/nqueens.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception (evaluate)
import Control.Monad (when)
import Control.Parallel (par, pseq)
import Data.Bits
import Data.List (foldl')
import GHC.Clock (getMonotonicTimeNSec)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

-- | The free columns' bits, one at a time (lowest first).
bitsOf :: Int -> [Int]
bitsOf 0 = []
bitsOf av = (av .&. negate av) : bitsOf (av .&. (av - 1))

seqCount :: Int -> Int -> Int -> Int -> Int -> Int
seqCount n row cols ld rd
  | row == n  = 1
  | otherwise = go (full .&. complement (cols .|. ld .|. rd)) 0
  where
    full = bit n - 1
    go 0 !acc = acc
    go av !acc =
      let b = av .&. negate av
      in go (av .&. (av - 1))
            (acc + seqCount n (row + 1) (cols .|. b) (((ld .|. b) `shiftL` 1) .&. full)
                                                     ((rd .|. b) `shiftR` 1))

parCount :: Int -> Int -> Int -> Int -> Int -> Int -> Int
parCount n d row cols ld rd
  | row >= d || row == n = seqCount n row cols ld rd
  | otherwise            = foldr par () kids `pseq` foldl' (+) 0 kids
  where
    full = bit n - 1
    kids = [ parCount n d (row + 1) (cols .|. b) (((ld .|. b) `shiftL` 1) .&. full)
                                                  ((rd .|. b) `shiftR` 1)
           | b <- bitsOf (full .&. complement (cols .|. ld .|. rd)) ]

known :: [(Int, Int)]
known = [ (1, 1), (4, 2), (5, 10), (6, 4), (7, 40), (8, 92), (9, 352), (10, 724)
        , (11, 2680), (12, 14200), (13, 73712), (14, 365596) ]

body :: Int -> Int -> IO (Int, Double)
body n d = do
  t0 <- getMonotonicTimeNSec
  !c <- evaluate (parCount n d 0 0 0 0)
  t1 <- getMonotonicTimeNSec
  return (c, fromIntegral (t1 - t0) / 1e6)

main :: IO ()
main = do
  args <- getArgs
  let (n, d) = case args of
        (a : b : _) -> (read a, read b)
        [a]         -> (read a, 3)
        []          -> (12, 3)
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n d >>= putMVar r)   -- timed body runs in an unbound thread
  (got, ms) <- takeMVar r
  -- Sizes without a tabulated count are checked against the sequential search.
  let ok = got == maybe (seqCount n 0 0 0 0) id (lookup n known)
  printf "capstan-bench name=nqueens impl=ghc caps=%d n=%d ms=%.3f sparks=na check=%s\n"
    caps n ms (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
